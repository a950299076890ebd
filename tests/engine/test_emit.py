"""Token events share writes (fewer wake-ups of the client while decode runs) but never change order, and the
first token and the end of a reply are never held back."""

from __future__ import annotations

import time

from hisho.core.protocol import decode
from hisho.engine import server as S


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.writes.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


def events(rec: Recorder) -> list[dict[str, object]]:
    return [decode(line) for w in rec.writes for line in w.splitlines()]


def test_token_events_are_coalesced_in_order() -> None:
    rec = Recorder()
    srv = S.Server(rec)  # type: ignore[arg-type]
    srv.emit({"id": 1, "ev": "token", "token": 0, "text": "first"})
    assert len(rec.writes) == 1  # the first token goes out at once
    for i in range(1, 50):
        srv.emit_soon({"id": 1, "ev": "token", "token": i, "text": str(i)})
    srv.emit({"id": 1, "ev": "done", "stop_reason": "length"})
    got = events(rec)
    assert [e.get("token") for e in got[:-1]] == list(range(50)) and got[-1]["ev"] == "done"
    assert len(rec.writes) < 10  # 50 events written in a few writes, not 50


def test_pending_tokens_leave_within_the_coalescing_interval() -> None:
    rec = Recorder()
    srv = S.Server(rec)  # type: ignore[arg-type]
    srv.emit({"id": 2, "ev": "token", "token": 0, "text": "a"})
    srv.emit_soon({"id": 2, "ev": "token", "token": 1, "text": "b"})
    assert len(rec.writes) == 1
    time.sleep(S.COALESCE_S * 1.5)
    srv.emit_soon({"id": 2, "ev": "token", "token": 2, "text": "c"})  # the interval passed: both go now
    assert [e["token"] for e in events(rec)] == [0, 1, 2]
    srv.emit_soon({"id": 2, "ev": "token", "token": 3, "text": "d"})
    srv.flush_pending()  # what op_generate does on any exit, so nothing is left behind on an error
    assert [e["token"] for e in events(rec)] == [0, 1, 2, 3]
