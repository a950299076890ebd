"""Continuous batching: many prompts decoded as parallel sequences of ONE llama.cpp context.

Runs on the engine thread only. The context must have ``n_seq_max`` >= the parallelism asked for; every item
must fit the cells one sequence can use (``n_ctx_seq``). The app runs batches in a job context with one KV stream
per sequence (``Runtime.job_context``: in a unified cache each token would attend over every sequence's cells).

Each ``llama_decode`` call carries, in this order:
1. one token for every sequence that is generating (its last sampled token, logits on), then
2. prompt tokens of sequences still prefilling, up to ``n_batch`` in all (logits on a prompt's last token).

So decode steps of finished-prefill sequences ride along in other sequences' prefill batches instead of waiting
for them, and a sequence whose item finishes is wiped (``llama_memory_seq_rm``) and takes the next item at once
(continuous batching). Decode is memory-bandwidth bound: reading the weights once for 8 tokens costs about what
it costs for one, which is where the gain comes from.
"""

from __future__ import annotations

import codecs
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import ErrorKind, Sampling
from hisho.engine.decode.sampler import Sampler
from hisho.engine.lib.llama_setup import hit_stop
from hisho.engine.model.runtime import RequestError, Runtime
from hisho.engine.model.vision import next_image

log = logging.getLogger("hisho.engine")


@dataclass
class Item:
    index: int
    prompt: list[int]
    max_tokens: int


@dataclass
class _Slot:
    seq: int
    item: Item | None = None
    fed: int = 0                      # prompt tokens already in the KV cache
    pos: int = 0                      # next position in this sequence
    last: int = -1                    # last sampled token, fed in the next step
    out: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    sampler: Sampler | None = None
    logits_at: int = -1               # index of this slot's logits in the current batch
    pause_at: int = -1                # a step feeds the prompt no further than this (a checkpoint is taken there)
    started: float = 0.0
    first_token_s: float = 0.0
    utf8: Any = None

    @property
    def prefilling(self) -> bool:
        return self.item is not None and self.fed < len(self.item.prompt)


@dataclass
class BatchStats:
    items: int = 0
    n_parallel: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    steps: int = 0
    wall_s: float = 0.0
    pure_decode_s: float = 0.0        # time in steps that held no prompt tokens
    pure_decode_tokens: int = 0
    cancelled: bool = False

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["decode_tokens_per_s"] = self.pure_decode_tokens / self.pure_decode_s if self.pure_decode_s else 0.0
        return d


Done = Callable[[dict[str, Any]], None]


def run_batched(rt: Runtime, items: list[Item], sampling: Sampling, n_parallel: int,
                cancelled: Callable[[], bool], on_done: Done,
                on_progress: Callable[[int, int], None] | None = None) -> BatchStats:
    """Generate a reply for every item; ``on_done`` gets each finished item's result as soon as it ends.

    Items may finish out of order. ``cancelled`` is checked before every decode step; on cancel the unfinished
    items are dropped (their KV is wiped) and the stats say ``cancelled``. ``on_progress(done, total)`` after
    every step that read prompt tokens: prompt tokens read so far of all the items' prompt tokens (a long
    document's map phase reports its reading, not only its finished chunks).
    """
    n_par = max(1, min(n_parallel, rt.n_seq_max, len(items) or 1))
    for item in items:
        if not item.prompt:
            raise RequestError(ErrorKind.BAD_REQUEST, f"item {item.index} has an empty prompt")
        if len(item.prompt) + item.max_tokens > rt.n_ctx_seq:
            raise RequestError(ErrorKind.CONTEXT_FULL, f"item {item.index}: {len(item.prompt)} prompt tokens + "
                                               f"{item.max_tokens} to generate do not fit the {rt.n_ctx_seq} cells of a sequence")
    stats = BatchStats(items=len(items), n_parallel=n_par)
    total = sum(len(item.prompt) for item in items)
    pending = deque(items)
    slots = [_Slot(seq=s) for s in range(n_par)]
    start = time.perf_counter()
    try:
        for slot in slots:
            rt.seq_rm(slot.seq, 0)
            _assign(rt, slot, pending, sampling)
        while any(s.item is not None for s in slots):
            if cancelled():
                stats.cancelled = True
                break
            read = stats.prefill_tokens
            _step(rt, slots, stats)
            if on_progress is not None and stats.prefill_tokens > read:
                on_progress(stats.prefill_tokens, total)
            for slot in slots:
                if slot.logits_at >= 0:
                    _sample(rt, slot, stats, on_done, pending, sampling)
    finally:
        for slot in slots:
            _release(rt, slot)
        stats.wall_s = time.perf_counter() - start
    return stats


def _assign(rt: Runtime, slot: _Slot, pending: deque[Item], sampling: Sampling) -> None:
    _release(rt, slot)
    if not pending:
        return
    slot.item = pending.popleft()
    slot.sampler = Sampler(rt, sampling)
    slot.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    slot.started = time.perf_counter()


def _release(rt: Runtime, slot: _Slot) -> None:
    if slot.sampler is not None:
        slot.sampler.free()
    if slot.item is not None or slot.pos:
        rt.seq_rm(slot.seq, 0)
    slot.item, slot.sampler, slot.fed, slot.pos, slot.last = None, None, 0, 0, -1
    slot.out, slot.text, slot.logits_at, slot.first_token_s = [], [], -1, 0.0


def _step(rt: Runtime, slots: list[_Slot], stats: BatchStats) -> None:
    """Fill one batch (decode tokens first, then prompt tokens) and run llama_decode on it."""
    for slot in slots:  # images first: each is encoded and decoded on its own (hisho.engine.model.vision)
        while slot.prefilling and slot.item is not None and slot.item.prompt[slot.fed] < 0:
            end = rt.decode_image_at(slot.seq, slot.item.prompt, slot.fed, slot.pos)
            slot.pos += end - slot.fed
            slot.fed = end
    batch = rt.batch
    batch.clear()
    for slot in slots:
        slot.logits_at = -1
        if slot.item is not None and not slot.prefilling:
            slot.logits_at = batch.n
            batch.add(slot.last, slot.pos, slot.seq, True)
    n_decode = batch.n
    budget = rt.n_batch - batch.n
    for slot in slots:
        if budget <= 0:
            break
        if not slot.prefilling:
            continue
        assert slot.item is not None
        prompt = slot.item.prompt
        take = min(budget, (slot.pause_at if slot.fed < slot.pause_at else len(prompt)) - slot.fed)
        take = next_image(prompt, slot.fed, slot.fed + take) - slot.fed  # an image waits for the next step
        for i in range(take):
            last = slot.fed + i == len(prompt) - 1
            if last:
                slot.logits_at = batch.n
            batch.add(prompt[slot.fed + i], slot.pos + i, slot.seq, last)
        slot.fed += take
        slot.pos += take
        budget -= take
    n_prompt = batch.n - n_decode
    t0 = time.perf_counter()
    rc = rt.run_step(batch)  # the thread governor picks the threads (hisho.engine.lib.threads)
    if rc == 1:
        raise RequestError(ErrorKind.CONTEXT_FULL, "no KV cache slot left for the batch: prompts + replies of the "
                                           "parallel sequences exceed n_ctx")
    if rc != 0:
        raise RequestError(ErrorKind.INTERNAL, f"llama_decode failed with code {rc}")
    dt = time.perf_counter() - t0
    stats.steps += 1
    stats.prefill_tokens += n_prompt
    if n_prompt == 0:
        stats.pure_decode_s += dt
        stats.pure_decode_tokens += n_decode
    for slot in slots:
        if slot.item is not None and slot.last >= 0 and not slot.prefilling and slot.logits_at < n_decode:
            slot.pos += 1  # the decode token just fed is now in this sequence's cache


def _sample(rt: Runtime, slot: _Slot, stats: BatchStats, on_done: Done, pending: deque[Item],
            sampling: Sampling) -> None:
    item = slot.item
    assert item is not None and slot.sampler is not None
    token = slot.sampler.sample(rt.ctx, slot.logits_at)
    reason = ""
    if not sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(rt.vocab, token):
        reason = "eos"
    else:
        if not slot.out:
            slot.first_token_s = time.perf_counter() - slot.started
        slot.out.append(token)
        slot.text.append(slot.utf8.decode(rt.piece(token)))
        stats.decode_tokens += 1
        slot.last = token
        if hit_stop(slot.text, sampling.stop):
            reason = "stop"
        elif len(slot.out) >= item.max_tokens:
            reason = "length"
        elif slot.pos + 1 >= rt.n_ctx_seq:
            reason = "context_full"
    if reason:
        slot.text.append(slot.utf8.decode(b"", final=True))
        on_done({"item": item.index, "text": "".join(slot.text), "prompt_tokens": len(item.prompt),
                 "completion_tokens": len(slot.out), "stop_reason": reason, "ttft_s": slot.first_token_s,
                 "seconds": time.perf_counter() - slot.started, "seq": slot.seq})
        _assign(rt, slot, pending, sampling)
