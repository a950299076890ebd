"""This machine's reading and writing speed for a model, measured once and kept in the summary cache: the
ETA of a summary before it starts. No Qt.

Rules of use: ``probe_speeds`` runs a batch (the engine swaps in a job context, so the chat sequence is dropped):
call it before a reading on the chat sequence, never during one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hisho.core.documents.cache import SummaryCache
from hisho.core.engine.ops import BatchGenerate, Prompt
from hisho.core.engine.protocol import Sampling

# aggregate decode of 8 sequences ÷ one on a 2-core x86-64 CPU (237 ÷ 124 tok/s), until a bench stores one
BATCH_GAIN = 1.9


def probe_speeds(client: Any, cache: SummaryCache, model_fp: str,
                 write: Callable[[Callable[[], Any]], Any]) -> tuple[float, float, float]:
    """Measure prefill and decode speed once per model (a 256-token prompt, 16 tokens), then remember it.
    Returns (prefill tokens/s, decode tokens/s, batch gain)."""
    prompt = {"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 26}
    sampling = Sampling(temperature=0.0, max_tokens=16, ignore_eos=True, repeat_penalty=1.0)
    stream = client.batch(BatchGenerate(items=[Prompt(messages=[prompt]).to_wire()], sampling=sampling,
                                        n_parallel=1, n_ctx_per_seq=512))
    events = list(stream)
    extra = stream.result.extra if stream.result is not None else {}
    wall = float(extra.get("wall_s", 0.0))
    decode_s = float(extra.get("pure_decode_s", 0.0))
    prefill_tokens = int(extra.get("prefill_tokens", 0))
    ttft = float(events[0].get("ttft_s", 0.0)) if events else 0.0
    prefill = prefill_tokens / (ttft or max(1e-3, wall - decode_s))
    decode = float(extra.get("decode_tokens_per_s", 0.0))
    speeds = (prefill, decode, BATCH_GAIN)
    write(functools.partial(cache.put_speeds, model_fp, *speeds))
    return speeds
