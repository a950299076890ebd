"""``hisho bench api``'s concurrent decode rate counts only the stretch where every stream was decoding, as raw
batched decode does (all sequences in every step): streams that join a step late or finish early do not lower
it. No engine is started."""

from __future__ import annotations

from typing import Any

from hisho.bench.api import _all_decoding_rate


def _stream(first: float, n: int, step: float) -> dict[str, Any]:
    times = [first + i * step for i in range(n)]
    return {"first_at": times[0], "last_at": times[-1], "times": times}


def test_rate_over_the_stretch_all_streams_decode() -> None:
    # Four streams, one token per 0.01 s each, the last joining 0.05 s late and the first leaving early.
    streams = [_stream(0.0, 101, 0.01), _stream(0.0, 101, 0.01), _stream(0.0, 80, 0.01), _stream(0.05, 101, 0.01)]
    rate = _all_decoding_rate(streams)
    assert abs(rate - 400.0) < 15.0   # 4 streams x 100 tokens/s, not diluted by the join and the early finish


def test_no_common_stretch_gives_zero() -> None:
    assert _all_decoding_rate([_stream(0.0, 5, 0.01), _stream(1.0, 5, 0.01)]) == 0.0
