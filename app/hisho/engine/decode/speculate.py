"""Draft-free speculation for greedy replies: prompt lookup (n-gram) drafts, verified in one ``llama_decode``.

At each step the last few tokens of prompt + reply are looked up where they occurred before; the tokens that
followed there are the draft. The next token and the draft are decoded as one batch with logits for each
position; the sampler chain then samples position by position, exactly as the plain loop would have sampled one
token per step (the chain's penalty history included), and stops at the first sample that differs from the
draft. The draft tokens after it are cut from the KV cache with ``llama_memory_seq_rm``. Every emitted token is
one sample of the same chain, so the output is the plain loop's wherever a batch's rounding decides nothing: a
position whose two best tokens are closer than ``TIE`` is decoded again alone. What this cannot cover: the KV
of accepted drafts carries the batch's rounding, and a near tie later in the reply can go the other way
(the tests check identical replies on the bundled model and a true-shape file).

Off unless ``HISHO_SPECULATE=1`` (docs/speed.md: not every greedy reply comes out identical). Then only where it
pays (``wanted``): dense memory (a sliding window or a recurrent state cannot be cut back
exactly), greedy sampling, and a per-model check measured on this machine at first use: a verify batch of
``DRAFT + 1`` tokens must cost less than ``PAYS`` single steps, or no reply of this model drafts. Within a reply,
drafting stops when what it accepted does not pay for what the batches cost (text that does not repeat its
source). Decisions: docs/speed.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from typing import Any

import llama_cpp
import numpy as np

from hisho.core.engine.protocol import Sampling
from hisho.engine.decode.sampler import Sampler
from hisho.engine.lib.llama_setup import logits_at
from hisho.engine.model.runtime import Runtime

log = logging.getLogger("hisho.engine")

NGRAMS = (4, 3, 2)      # longest match first: a longer n-gram predicts its continuation better
DRAFT = 8               # tokens proposed per step at most
PAYS = 0.5              # a verify batch must cost under DRAFT * PAYS + 1 single steps to be worth trying
TIE = 0.25              # logits closer than this count as a tie (a batch's rounding could decide it)
GIVE_UP_AFTER = 6       # verify batches in a reply before its measured gain decides whether drafting goes on

# Per model file (and thread setting): the measured cost of a verify batch in single steps, or None when
# speculation does not pay for that model on this machine. Kept for the engine process's life.
_MEASURED: dict[tuple[str, int], float | None] = {}
_FORCED: list[bool | None] = [None]   # tests and benches: on or off regardless of the measurement


def wanted(rt: Runtime, seq: int, sampling: Sampling, probe: int) -> bool:
    """Whether this reply drafts: greedy without a grammar (drafts are never masked by one), dense memory, and
    measured to pay for this model. Called before the
    prompt's last token is decoded: a first measurement (a few steps of token ``probe`` at the sequence's end,
    cut away again) must not overwrite the logits the reply samples first."""
    if sampling.temperature > 0 or sampling.grammar or sampling.grammar_schemas:
        return False
    if not rt.keeper.dense or not rt.unified_kv:
        return False
    if _FORCED[0] is not None:
        return _FORCED[0]
    if os.environ.get("HISHO_SPECULATE", "") != "1":
        # Off unless asked for: a verify batch's KV carries other rounding than one-token steps, and a later
        # near tie (logits ~0.1 apart) can then go the other way (docs/speed.md); the gain measured on a
        # loaded 2-core box did not pay for that yet.
        return False
    key = (str(rt.params.model_path), int(rt.params.n_threads))
    if key not in _MEASURED:
        _MEASURED[key] = _measure(rt, seq, probe)
    return _MEASURED[key] is not None


def _measure(rt: Runtime, seq: int, probe: int) -> float | None:
    """Time one-token steps and ``DRAFT + 1``-token steps at the end of ``seq`` (min of 3 each, after one
    warm-up of each shape), then cut them away. The ratio is what a verify batch costs in single steps."""
    base = len(rt.seqs.get(seq, []))
    if base + DRAFT + 2 >= rt.n_ctx:
        return None

    def step(n: int) -> float:
        rt.batch.clear()
        for i in range(n):
            rt.batch.add(probe, base + i, seq, True)
        started = time.perf_counter()
        try:
            rt.decode_batch()
            return time.perf_counter() - started
        finally:
            llama_cpp.llama_memory_seq_rm(rt.memory, seq, base, -1)

    step(1), step(DRAFT + 1)
    one = min(step(1) for _ in range(3))
    many = min(step(DRAFT + 1) for _ in range(3))
    cost = many / one if one > 0 else float("inf")
    pays = cost < DRAFT * PAYS + 1
    log.info("speculation for %s: a %d-token verify step costs %.2f single steps (%.1f ms vs %.1f ms): %s",
             rt.params.model_path, DRAFT + 1, cost, many * 1e3, one * 1e3, "on" if pays else "off")
    return cost if pays else None


def forget_measurements() -> None:
    """Tests: measure again at the next reply."""
    _MEASURED.clear()


def force(on: bool | None) -> None:
    """Draft in every reply where it is exact (True), in none (False), or where measured to pay (None)."""
    _FORCED[0] = on


class NgramIndex:
    """Where each n-gram of the history last ended, updated as tokens are appended."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens: list[int] = []
        self.last: dict[tuple[int, ...], int] = {}
        for t in tokens:
            self.append(t)

    def append(self, token: int) -> None:
        toks = self.tokens
        # Record the n-grams that end just before ``token`` (their continuation is ``token``), then append it:
        # the latest occurrence wins, and the n-gram ending at the very end is never its own match.
        end = len(toks)
        for n in NGRAMS:
            if end >= n:
                self.last[tuple(toks[end - n:end])] = end
        toks.append(token)

    def draft(self, k: int) -> list[int]:
        toks = self.tokens
        for n in NGRAMS:
            if len(toks) < n:
                continue
            at = self.last.get(tuple(toks[-n:]))
            if at is not None:
                return toks[at:at + k]
        return []


class Speculator:
    """The reply loop's source of sampled tokens and its decode step (``hisho.engine.decode.reply.generate``)."""

    def __init__(self, rt: Runtime, seq: int, sampler: Sampler, history: list[int], sampling: Sampling) -> None:
        self.rt, self.seq, self.sampler, self.sampling = rt, seq, sampler, sampling
        self.emitted: list[int] = []       # the reply so far: the chain's penalty history
        self.ties = 0
        remaining = sampling.max_tokens
        self.index = NgramIndex(history)
        self.ready: deque[int] = deque()   # sampled, not yet handed out
        self.in_kv = 0                     # how many of ``ready`` the KV cache already holds (accepted drafts)
        self.remaining = remaining         # tokens the reply may still emit
        self.on = True
        self.batches = 0
        self.gained = 0                    # tokens emitted by verify batches beyond one per batch
        self.cost = 0.0                    # their cost in single steps, as measured at first use

    def next_token(self) -> int:
        if self.ready:
            return self.ready.popleft()
        return self.sampler.sample(self.rt.ctx)

    def advance(self, token: int) -> None:
        """``token`` was emitted: make the cache hold it, drafting what might follow it."""
        rt, held = self.rt, self.rt.seqs[self.seq]
        self.index.append(token)
        self.emitted.append(token)
        self.remaining -= 1
        if self.in_kv:                 # an accepted draft token: decoded already
            self.in_kv -= 1
            held.append(token)
            return
        room = min(DRAFT, self.remaining - 1, rt.n_ctx - len(held) - 2, rt.batch.capacity - 1)
        draft = self.index.draft(room) if self.on and room > 0 else []
        rt.batch.clear()
        rt.batch.add(token, len(held), self.seq, True)
        for i, tok in enumerate(draft):
            rt.batch.add(tok, len(held) + 1 + i, self.seq, True)
        rt.decode_batch()
        held.append(token)
        if not draft:
            return
        accepted = 0
        base = len(held) - 1             # the position of ``token``; batch index i holds position base + i
        for i in range(len(draft) + 1):
            if not self._clear_winner(i):
                # A near tie: a batch's logits may differ from one token's in the last bits, which could pick
                # another token than the plain loop. Keep what is accepted, decode this position alone.
                llama_cpp.llama_memory_seq_rm(rt.memory, self.seq, base + i, -1)
                rt.batch.clear()
                rt.batch.add(token if i == 0 else draft[i - 1], base + i, self.seq, True)
                rt.decode_batch()
                self.ready.append(self.sampler.sample(rt.ctx))
                self.ties += 1
                break
            got = self.sampler.sample(rt.ctx, i)
            self.ready.append(got)
            if i == len(draft) or got != draft[i]:
                llama_cpp.llama_memory_seq_rm(rt.memory, self.seq, base + i + 1, -1)
                break
            accepted += 1
        # The drafts after the accepted ones are not the reply: they were cut (dense memory: an exact cut).
        self.in_kv = accepted
        self._judge(accepted, len(draft))

    def _clear_winner(self, i: int) -> bool:
        """Whether the best token at batch index ``i`` leads the next by more than batch-vs-single noise, after
        what the chain does to the logits first (the reply's repeat penalty, the banned end tokens)."""
        rt = self.rt
        logits = logits_at(rt.ctx, i, rt.n_vocab).copy()
        s = self.sampling
        if s.ignore_eos:
            for t in (int(llama_cpp.llama_vocab_eos(rt.vocab)), int(llama_cpp.llama_vocab_eot(rt.vocab))):
                if t >= 0:
                    logits[t] = -np.inf
        history = self.emitted + list(self.ready)   # what the chain has accepted: this batch's samples too
        if s.repeat_penalty != 1.0 and history:
            seen = np.fromiter(set(history[-s.repeat_last_n:]), dtype=np.int64)
            vals = logits[seen]
            logits[seen] = np.where(vals > 0, vals / s.repeat_penalty, vals * s.repeat_penalty)
        top2 = np.partition(logits, -2)[-2:]
        return bool(top2[1] - top2[0] > TIE)

    def _judge(self, accepted: int, drafted: int) -> None:
        self.batches += 1
        self.gained += accepted
        cost = _MEASURED.get((str(self.rt.params.model_path), int(self.rt.params.n_threads)))
        # A batch of d + 1 tokens costs about 1 + (cost - 1) * d / DRAFT single steps (linear in its size).
        self.cost += ((cost or float(DRAFT + 1)) - 1) * drafted / DRAFT
        if self.batches >= GIVE_UP_AFTER and self.gained <= self.cost:
            self.on = False
            log.info("speculation off for this reply: %d batches gained %d tokens for %.1f steps of cost",
                     self.batches, self.gained, self.cost)

    def finish(self) -> None:
        """The reply ended: the cache must hold exactly the emitted tokens (drafts accepted but not emitted,
        after an end token or a stop, are cut)."""
        if self.in_kv:
            held = self.rt.seqs[self.seq]
            llama_cpp.llama_memory_seq_rm(self.rt.memory, self.seq, len(held), -1)
            self.in_kv = 0
        self.ready.clear()

    def stats(self) -> dict[str, Any]:
        return {"batches": self.batches, "accepted": self.gained, "ties": self.ties, "on": self.on}
