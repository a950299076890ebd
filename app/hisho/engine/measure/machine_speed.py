"""This machine's speed as llama.cpp sees it, measured once at first start on the bundled model: the probe
child's ``speed`` command (``python -m hisho.engine.measure.probe speed``; the parent's side and the profile it
makes: ``hisho.core.planner.first_speed``).

It loads the model with the engine's own ``Runtime`` (threads, batch and mmap as a chat loads it). One model is
made to give two sizes of work by its output layer, which llama.cpp computes only for the rows asked for:

- decode: one-token steps with the logit asked for and without, interleaved (the step without reads every
  weight but the output layer; the same fixed cost);
- prompt: a ``prompt`` of synthetic tokens read with the last logit only (as a chat reads it) and with every
  logit (the output layer's multiply-adds once per token more), each the better of two.

Nothing is sampled, so the figures are llama.cpp's work alone (sampling costs microseconds a token:
docs/speed.md). A few seconds on a small model.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from hisho.core.engine.protocol import LoadParams

PROMPT_TOKENS = 256
DECODE_STEPS = 48  # half with the logit, half without


def measure_speed(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: ``params`` (LoadParams), optional ``prompt`` and ``steps``. Answers tokens per second of the
    prompt (last logit / every logit) and of one-token decode (with / without the logit), and the threads."""
    from hisho.engine.lib.llama_setup import physical_cores
    from hisho.engine.model.runtime import Runtime

    params = LoadParams.from_dict(request["params"])
    n_prompt = int(request.get("prompt", PROMPT_TOKENS))
    n_steps = int(request.get("steps", DECODE_STEPS))
    rt = Runtime.load(params)
    try:
        n_prompt = min(n_prompt, rt.n_batch, rt.n_ctx - n_steps - 1)
        tokens = [(i * 7919 + 11) % rt.n_vocab for i in range(n_prompt + n_steps)]
        last = min(_read(rt, tokens[:n_prompt], every=False) for _ in range(2))
        every = min(_read(rt, tokens[:n_prompt], every=True) for _ in range(2))
        _read(rt, tokens[:n_prompt], every=False)  # the steps continue this prompt
        with_logit: list[float] = []
        without: list[float] = []
        for i, tok in enumerate(tokens[n_prompt:]):
            began = time.perf_counter()
            rt.decode_tokens(0, [tok], want_logits=i % 2 == 0, checkpoints=False)
            (with_logit if i % 2 == 0 else without).append(time.perf_counter() - began)
        threads = int(params.n_threads or physical_cores())
    finally:
        rt.close()
    return {"ok": True, "prompt_tokens": n_prompt, "prompt_tok_s": n_prompt / last,
            "prompt_every_logit_tok_s": n_prompt / every, "decode_tok_s": 1.0 / statistics.median(with_logit),
            "decode_no_logit_tok_s": 1.0 / statistics.median(without), "threads": threads}


def _read(rt: Any, tokens: list[int], *, every: bool) -> float:
    """Seconds to read ``tokens`` into an empty sequence 0 in one batch: the last logit only, or ``every`` one."""
    rt.seq_rm(0)
    rt.batch.clear()
    for i, tok in enumerate(tokens):
        rt.batch.add(tok, i, 0, every or i == len(tokens) - 1)
    began = time.perf_counter()
    rt.decode_batch()
    seconds = time.perf_counter() - began
    rt.seqs[0] = list(tokens)
    return max(seconds, 1e-9)
