"""The serving batch: API requests decoded as parallel sequences of the chat context (``hisho serve``).

Runs on the engine thread only. It is the continuous batching of ``hisho.engine.decode.batched`` (same slots, same
step: decode tokens first, then prompt tokens up to ``n_batch``) kept alive while requests arrive: a ``serve``
request joins at the next step, a cancelled or finished one leaves without stopping the others, and requests
beyond the free sequences wait in arrival order (their position is reported as a ``queued`` event).

Differences from a summary batch: each request has its own sampling and stop strings, tokens are streamed as
they are sampled, and a sequence keeps its cells after its request ends, so a client resending the same prefix
(a system prompt, a file, the conversation so far) prefills only what differs: a new request takes the free
sequence that shares the longest prefix with it (``cached_tokens``). ``Runtime.seqs`` is kept in step, so the
window's own ``generate`` on sequence 0 afterwards reuses what is there, as it does after its own turns.

In a unified KV cache the last sequence is left alone (KV saves use it as their scratch sequence,
``hisho.engine.kv.kvstate``). ``hisho serve`` loads the model with one KV stream per sequence (``kv_unified`` off):
there, greedy replies of parallel requests are exactly those of each request alone (measured: 8 of 8 equal;
in a unified cache 5 of 8, because every token's attention then spans all sequences' cells), and the cost of
attention does not grow with the other sequences' lengths.
"""

from __future__ import annotations

import codecs
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import ErrorKind, Sampling, common_prefix
from hisho.engine.decode.batched import BatchStats, Item, _Slot, _step
from hisho.engine.decode.grammar import check_grammar
from hisho.engine.decode.replykeep import keep_reply
from hisho.engine.decode.sampler import Sampler
from hisho.engine.lib.llama_setup import hit_stop, token_event
from hisho.engine.model.runtime import RequestError, Runtime

log = logging.getLogger("hisho.engine")

Emit = Callable[[dict[str, Any]], None]

# How long the API's token events may wait to share a write (``Server.emit_soon``; the window's replies: 25 ms).
# Every write wakes a chain of the parent's threads (its reader, each stream's reply thread, the event loop, each
# client), and each takes a core from the decode threads for a moment: at 50 ms instead of 25, 4 streams of the
# bundled model decoded ~4 % faster (bench api). An SSE client still gets its text 20 times a second.
SERVE_COALESCE_S = 0.05


@dataclass
class Job:
    """One ``serve`` request: its prompt tokens, sampling and where its events go."""

    req_id: int
    prompt: list[int]
    sampling: Sampling
    emit: Emit             # token events (may be coalesced)
    emit_now: Emit         # the first token, queue positions and the end: never held back
    restore: Callable[[int, list[int]], int] | None = None  # (seq, prompt) -> tokens now in seq (disk cache)
    save: Callable[[int, Emit], None] | None = None  # (seq, done) saves seq's KV once the prompt is in (disk cache)
    arrived: float = field(default_factory=time.perf_counter)
    max_prompt: int = 0    # the API's prompt limit in tokens (0: the sequence's context)
    marks: tuple[int, ...] = ()  # message boundaries in ``prompt`` (message_marks): checkpoints on non-dense models
    forced: list[int] | None = None  # test hook force_text: the reply's tokens, decoded instead of sampled
    spec: dict[str, Any] = field(default_factory=dict)  # the request's prompt fields: its messages, if any
    # A save in flight holds the "done" event back until its files are written, so the client can index them.
    lock: threading.Lock = field(default_factory=threading.Lock)
    saving: int = 0        # saves in flight
    saved: dict[str, Any] | None = None
    snapshots: list[dict[str, Any]] = field(default_factory=list)  # _snapshot's reports
    held_done: dict[str, Any] | None = None


@dataclass
class _ServeSlot(_Slot):
    job: Job | None = None
    held: list[int] = field(default_factory=list)   # tokens in this sequence's cells (== rt.seqs[seq])
    cached: int = 0
    first_at: float = 0.0
    stops: list[str] = field(default_factory=list)
    out_base: int = 0  # out[:out_base] is part of item.prompt (re-prefilled after a window's turn, resync)
    marks: list[int] = field(default_factory=list)  # where the prefill stops for a checkpoint (pause_at first)


class ServingBatch:
    """Sequences ``0 .. n-1`` of ``rt`` serving requests; see the module docstring."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.unified = bool(rt.params.kv_unified) and rt.n_seq_max > 1
        n = rt.n_seq_max - 1 if self.unified else rt.n_seq_max
        self.slots = [_ServeSlot(seq=s) for s in range(n)]
        for slot in self.slots:
            slot.held = list(rt.seqs.get(slot.seq, []))
        self.waiting: deque[Job] = deque()
        self.stats = BatchStats(n_parallel=n)
        # Replies to keep once every slot has sampled from this step's logits (a decode in between would leave
        # the slots after it sampling from outputs that are gone): (slot, job, reply text).
        self._keeps: list[tuple[_ServeSlot, Job, str]] = []

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or any(s.job is not None for s in self.slots)

    def active_ids(self) -> list[int]:
        return [s.job.req_id for s in self.slots if s.job is not None] + [j.req_id for j in self.waiting]

    def add(self, job: Job) -> None:
        """Queue ``job``; it takes a sequence at once if one is free. Raises RequestError if it can never fit."""
        if not job.prompt:
            raise RequestError(ErrorKind.BAD_REQUEST, "empty prompt")
        if len(job.prompt) >= self.rt.n_ctx_seq:
            raise RequestError(ErrorKind.CONTEXT_FULL, f"the prompt has {len(job.prompt)} tokens; the context "
                                                       f"holds {self.rt.n_ctx_seq}")
        if job.max_prompt and len(job.prompt) > job.max_prompt:
            raise RequestError(ErrorKind.CONTEXT_FULL, f"the prompt has {len(job.prompt)} tokens; this server "
                                                       f"takes at most {job.max_prompt}")
        self.waiting.append(job)
        self._fill()
        for pos, waiting in enumerate(self.waiting, 1):
            if waiting is job:
                job.emit_now({"id": job.req_id, "ev": "queued", "position": pos})

    def cancel_where(self, cancelled: Callable[[int], bool]) -> None:
        """End every request ``cancelled(req_id)`` says is cancelled (waiting or running), at once."""
        for job in [j for j in self.waiting if cancelled(j.req_id)]:
            self.waiting.remove(job)
            self._done_event(job, "cancelled", [], "", 0, 0.0, 0.0)
        for slot in self.slots:
            if slot.job is not None and cancelled(slot.job.req_id):
                self._finish(slot, "cancelled")
        self._keep_replies()
        self._fill()

    def step(self) -> None:
        """One llama_decode for every running sequence, then sample those whose logits came out."""
        _step(self.rt, self.slots, self.stats)  # type: ignore[arg-type]  # a _ServeSlot is a _Slot
        for slot in self.slots:
            if slot.item is None:
                continue
            prompt, base = slot.item.prompt, slot.out_base
            # What the cells hold now: the prompt fed so far, then the sampled tokens fed back (not the last).
            slot.held = (prompt[:slot.pos] if slot.pos <= len(prompt)
                         else prompt + slot.out[base:base + slot.pos - len(prompt)])
            self.rt.seqs[slot.seq] = slot.held
            if slot.pause_at >= 0 and slot.fed == slot.pause_at:
                self._checkpoint(slot)
            if slot.logits_at >= 0:
                job = slot.job
                if not slot.out and job is not None and job.save is not None and not job.spec.get("messages"):
                    self._save(slot.seq, job)  # raw tokens: the whole prompt is in the cells, nothing else yet
                self._sample(slot)
        self._keep_replies()
        self._fill()

    def cells(self) -> dict[int, list[int]]:
        """What each sequence must hold for the requests to go on (a copy: an op run between steps changes
        ``Runtime.seqs`` in place)."""
        return {slot.seq: list(slot.held) for slot in self.slots}

    def resync(self, before: dict[int, list[int]]) -> None:
        """After an op that ran between two steps (the window's reply, a KV restore or save, a prefill):
        a sequence whose cells it changed is made whole again. A running request keeps what it generated;
        its cells are prefilled again from the longest prefix still there, then it samples on as before."""
        rt = self.rt
        for slot in self.slots:
            now = list(rt.seqs.get(slot.seq, []))
            want = before.get(slot.seq, [])
            if slot.job is None or slot.item is None:
                slot.held = now
                rt.seqs[slot.seq] = slot.held
                continue
            if now == want:
                slot.held = want
                rt.seqs[slot.seq] = slot.held
                continue
            item = slot.item
            if slot.out:  # decoding: the cells held prompt + out[:-1]; the last sampled token was not fed yet
                slot.item = item = Item(item.index, item.prompt + slot.out[slot.out_base:], item.max_tokens)
                slot.out_base = len(slot.out)
            keep = rt.seq_rm(slot.seq, min(common_prefix(now, want), len(item.prompt) - 1))
            slot.held = want[:keep]
            rt.seqs[slot.seq] = slot.held
            slot.fed = slot.pos = keep
            slot.logits_at = -1
            slot.marks = [m for m in slot.marks if m > keep]
            slot.pause_at = slot.marks[0] if slot.marks else -1
            log.info("serving batch: sequence %d changed by an op between steps; prefilling %d tokens again",
                     slot.seq, len(item.prompt) - keep)

    def _checkpoint(self, slot: _ServeSlot) -> None:
        """The prefill reached a mark: keep the partial state there (PrefixKeeper.checkpoint, its caps), so a
        later request that shares only this much restores it instead of prefilling from the start."""
        job = slot.job
        assert job is not None
        keeper = self.rt.keeper
        if slot.fed in job.marks or slot.fed == len(job.prompt) - 1 or not keeper.marks(slot.fed - 1, slot.fed + 1):
            keeper.checkpoint(slot.seq, prompt=True)
        else:
            keeper.interval_checkpoint(slot.seq)  # an interval mark only
            self._snapshot(slot, job)
        slot.marks = [m for m in slot.marks if m > slot.fed]
        slot.pause_at = slot.marks[0] if slot.marks else -1

    def _snapshot(self, slot: _ServeSlot, job: Job) -> None:
        """Separate KV streams (``hisho serve``) have no scratch sequence, so a save is one chunk of the whole
        sequence and its chunk ends are no restore points. On a window or recurrent model the prefix read so far
        is saved at each kept interval checkpoint instead (one file ``[0, mark)``; the index chains it from the
        root like any first chunk), so a request that parts from this one after a restart restores the nearest
        one (hisho.engine.model.prefix "Interval checkpoints")."""
        if self.unified or job.save is None or self.rt.keeper.interval_at(slot.seq, slot.fed) is None:
            return
        self._save(slot.seq, job, snapshot=True)

    def _save(self, seq: int, job: Job, *, snapshot: bool = False) -> None:
        assert job.save is not None

        def done(report: dict[str, Any]) -> None:  # the engine thread, or the KV writer's
            with job.lock:
                if snapshot:
                    job.snapshots.append(report)
                else:
                    job.saved = report
            self._one_save_less(job)

        job.saving += 1
        try:
            job.save(seq, done)
        except Exception as exc:  # a save that fails costs only the next prefill
            log.warning("disk prompt cache: save failed (%s)", exc)
            done({"error": str(exc)})

    def close(self, reason: str = "cancelled") -> None:
        """End everything (engine shutting down): every request gets its "done"."""
        for job in list(self.waiting):
            self._done_event(job, reason, [], "", 0, 0.0, 0.0)
        self.waiting.clear()
        for slot in self.slots:
            if slot.job is not None:
                self._finish(slot, reason)
        self._keep_replies()

    # ----- slots -----------------------------------------------------------------------------------------

    def _fill(self) -> None:
        while self.waiting:
            free = [s for s in self.slots if s.job is None]
            if not free:
                return
            job = self.waiting.popleft()
            slot = max(free, key=lambda s: common_prefix(s.held, job.prompt))
            self._assign(slot, job)

    def _assign(self, slot: _ServeSlot, job: Job) -> None:
        rt = self.rt
        self._make_room(slot, job)
        keep = min(common_prefix(slot.held, job.prompt), len(job.prompt) - 1)
        if job.restore is not None and keep < len(job.prompt) - 1:
            # The cells stay until the restore knows it has more to give: a follow-up (an agent's next turn after
            # a tool result) usually holds more of its prompt in them than the last save did.
            try:
                keep = min(job.restore(slot.seq, job.prompt), len(job.prompt) - 1)
            except Exception as exc:  # a bad file only costs the prefill (core/kv/session.py says the same)
                log.warning("disk prompt cache: restore failed (%s); prefilling", exc)
                keep = 0
            slot.held = list(rt.seqs.get(slot.seq, []))[:keep]
        keep = rt.keep_upto(slot.seq, job.prompt, keep)  # exact or shorter (a window, a recurrent state, an image)
        slot.held = slot.held[:keep]
        slot.job, slot.cached = job, keep
        slot.item = Item(job.req_id, job.prompt, job.sampling.max_tokens)
        slot.fed = slot.pos = keep
        # Sliding-window and recurrent models cannot cut back later: checkpoints at the message boundaries and
        # before the prompt's last token (a regenerate, an edit of the last message), as the chat's turns take.
        # A dense slot reads its prompt in one go: its cells share the unified cache with the other slots'
        # anyway, so its pieces are not one request's own (docs/kv-format.md "Numerics").
        # And at the interval marks, as every prompt reading (hisho.engine.model.prefix "Interval checkpoints").
        slot.marks = [] if rt.keeper.dense else sorted({m for m in (*job.marks, len(job.prompt) - 1)
                                                        if keep < m < len(job.prompt)}
                                                       | set(rt.keeper.marks(keep, len(job.prompt))))
        slot.pause_at = slot.marks[0] if slot.marks else -1
        slot.last, slot.out, slot.text, slot.logits_at = -1, [], [], -1
        slot.sampler = Sampler(rt, job.sampling)
        slot.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        slot.started, slot.first_at = job.arrived, 0.0
        slot.stops = [s for s in job.sampling.stop if s]
        rt.seqs[slot.seq] = slot.held

    def _make_room(self, slot: _ServeSlot, job: Job) -> None:
        """Wipe idle sequences' kept cells when the running ones plus this job could need more than the
        context has (a unified cache: every sequence takes cells from one pool)."""
        if not self.unified:
            return  # one KV stream per sequence: nobody else's cells are in the way
        need = len(job.prompt) + job.sampling.max_tokens
        running = 0
        for other in self.slots:
            if other.job is not None:
                running += len(other.held) + other.job.sampling.max_tokens
        if running + need + len(slot.held) <= self.rt.n_ctx:
            return
        for other in self.slots:
            if other.job is None and other is not slot and other.held:
                self.rt.seq_rm(other.seq, 0)
                other.held = []

    def _sample(self, slot: _ServeSlot) -> None:
        rt, job, item = self.rt, slot.job, slot.item
        assert job is not None and item is not None and slot.sampler is not None
        if job.forced is not None:  # test hook: the given tokens, then the end as at an end-of-generation token
            if len(slot.out) >= len(job.forced):
                self._finish(slot, "eos")
                return
            token = job.forced[len(slot.out)]
        else:
            token = slot.sampler.sample(rt.ctx, slot.logits_at)
        if not job.sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(rt.vocab, token):
            self._finish(slot, "eos")
            return
        now = time.perf_counter()
        first = not slot.out
        if first:
            slot.first_at = now
        slot.out.append(token)
        piece = slot.utf8.decode(rt.piece(token))
        slot.text.append(piece)
        slot.last = token
        self.stats.decode_tokens += 1
        event = token_event(rt, job.req_id, token, piece)
        (job.emit_now if first else job.emit)(event)
        if hit_stop(slot.text, slot.stops):
            self._finish(slot, "stop")
        elif len(slot.out) >= item.max_tokens:
            self._finish(slot, "length")
        elif slot.pos + 1 >= rt.n_ctx_seq:
            self._finish(slot, "context_full")

    def _finish(self, slot: _ServeSlot, reason: str) -> None:
        job = slot.job
        assert job is not None
        tail = slot.utf8.decode(b"", final=True) if slot.utf8 is not None else ""
        decode_s = time.perf_counter() - slot.first_at if slot.first_at else 0.0
        ttft = slot.first_at - job.arrived if slot.first_at else 0.0
        text = "".join(slot.text) + tail
        if job.save is not None and job.spec.get("messages") and reason != "cancelled" and slot.out:
            with job.lock:
                job.saving += 1     # "done" waits for the reply's save, which runs after this step's sampling
            self._keeps.append((slot, job, text))
        self._done_event(job, reason, slot.out, text, slot.cached, ttft, decode_s)
        if slot.sampler is not None:
            slot.sampler.free()
        # The cells stay (the next request with this prefix reuses them); only what they hold is recorded.
        self.rt.seqs[slot.seq] = slot.held
        slot.job, slot.item, slot.sampler, slot.utf8 = None, None, None, None
        slot.fed, slot.last, slot.logits_at, slot.pause_at, slot.marks = 0, -1, -1, -1, []

    def _keep_replies(self) -> None:
        """A chat request's reply is part of what is saved: the cells are made to hold what the next request
        renders for it, up to the next user header (hisho.engine.decode.replykeep), then saved; "done" waits for
        the files. Run after every slot sampled (keeping reads tokens: its own llama_decode) and before a freed
        slot takes a new request."""
        keeps, self._keeps = self._keeps, []
        for slot, job, text in keeps:
            try:
                keep_reply(self.rt, slot.seq, job.spec, text)
            except Exception as exc:  # the reply stands; only the save is what the cells held before
                log.warning("serving batch: the reply was not kept for the save (%s)", exc)
            slot.held = list(self.rt.seqs.get(slot.seq, []))
            self.rt.seqs[slot.seq] = slot.held
            self._save(slot.seq, job)
            self._one_save_less(job)         # the reservation _finish made

    def _one_save_less(self, job: Job) -> None:
        """A save of ``job`` ended (or a reservation for one was let go): the last one sends the held "done"."""
        with job.lock:
            job.saving -= 1
            event = job.held_done if not job.saving else None
            if event is not None:
                job.held_done = None
                event = self._with_saves(event, job)
        if event is not None:
            job.emit_now(event)

    def _done_event(self, job: Job, reason: str, tokens: list[int], text: str, cached: int, ttft: float,
                    decode_s: float) -> None:
        n = len(tokens)
        event = {"id": job.req_id, "ev": "done", "text": text, "prompt_tokens": len(job.prompt),
                 "cached_tokens": cached, "completion_tokens": n, "ttft_s": ttft, "decode_s": decode_s,
                 "tokens_per_s": (n - 1) / decode_s if n > 1 and decode_s > 0 else 0.0, "stop_reason": reason,
                 "raw_text": self.rt.raw_text(tokens), "threads": self.rt.threads_info()}
        if self.rt.vision is not None:
            event["image_encodes"] = self.rt.vision.encodes
        with job.lock:
            if job.saving:
                job.held_done = event  # sent by the last save's callback
                return
            event = self._with_saves(event, job)
        job.emit_now(event)

    @staticmethod
    def _with_saves(event: dict[str, Any], job: Job) -> dict[str, Any]:
        if job.saved is not None:
            event = {**event, "saved": job.saved}
        if job.snapshots:
            event = {**event, "snapshots": list(job.snapshots)}
        return event


QUICK_OPS = frozenset({"tokenize", "detokenize", "hello", "kv_info", "kv_flush", "abort"})  # run between steps
# Ops on one sequence (the window's chat on sequence 0 and its KV restores and saves, a type-ahead prefill) also
# run between two steps, whole: the window's reply is never behind more than one step of the API's requests.
# A sequence they change is made whole again afterwards (ServingBatch.resync).
TURN_OPS = frozenset({"generate", "prefill", "state_load", "state_save", "seq_rm"})


def run_serving(server: Any, req_id: int, req: Any) -> None:
    """The engine thread while API requests run: ``req`` (a ``Serve``) starts the batch; between steps the
    engine's queue is drained: more ``serve`` requests join, quick ops (token counts) and ops on one sequence
    (the window's reply, its KV restores and saves) run at once, anything else (a load, a summary batch) waits
    until the batch is empty, then runs in arrival order (and so does whatever arrives after it).
    ``server`` is ``hisho.engine.server.Server``."""
    rt = server.need_runtime()
    batch = ServingBatch(rt)
    joined = [req_id]
    deferred = False
    _join(server, batch, req_id, req)
    try:
        while batch.busy:
            while True:
                job = server.next_job_nowait()
                if job is None:
                    break
                if job.get("op") == "serve":
                    joined.append(int(job.get("id", -1)))
                    _join(server, batch, joined[-1], job)
                elif job.get("op") in QUICK_OPS:
                    server.run_job(job)
                elif job.get("op") in TURN_OPS and not deferred:
                    before = batch.cells()
                    server.run_job(job)
                    batch.resync(before)
                else:
                    deferred = True  # what comes after it waits too: the engine runs requests in order
                    server.defer(job)
                    if job.get("op") == "shutdown" or job.get("stop"):
                        batch.close("cancelled")
            batch.cancel_where(server.is_cancelled)
            if not batch.busy:
                break
            batch.step()
    except Exception as exc:
        kind = ErrorKind.of(getattr(exc, "kind", ErrorKind.INTERNAL))
        if kind is ErrorKind.INTERNAL:
            log.exception("serving batch failed")
        for rid in batch.active_ids():
            server.error(rid, kind, str(exc) or type(exc).__name__)
        for slot in batch.slots:  # what the cells hold is unknown now
            rt.seq_rm(slot.seq, 0)
    finally:
        server.flush_pending()
        server.forget_cancel(joined)


def _join(server: Any, batch: ServingBatch, req_id: int, message: Any) -> None:
    from hisho.core.engine.ops import Serve, parse_request

    try:
        req = message if isinstance(message, Serve) else parse_request(message)
        assert isinstance(req, Serve)
        prompt = batch.rt.prompt_tokens(req.spec())
        images = any(t < 0 for t in prompt)  # the disk prompt cache keeps text prompts only (docs/images.md)
        restore = server.restorer(req) if req.chunks and not images else None
        save = server.saver(req) if req.save_dir and not images else None
        emit = functools.partial(server.emit_soon, hold=SERVE_COALESCE_S)
        forced = batch.rt.forced_tokens(req.test_hooks) if server.test_hooks else None
        if req.sampling.grammar or req.sampling.grammar_schemas:
            check_grammar(batch.rt, req.sampling)  # now: a bad one found when it gets a sequence would end the batch
        batch.add(Job(req_id, prompt, req.sampling, emit, server.emit, restore, save,
                      max_prompt=req.max_prompt, marks=message_marks(batch.rt, req.spec(), prompt), forced=forced,
                      spec=req.spec()))
    except Exception as exc:
        kind = ErrorKind.of(getattr(exc, "kind", ErrorKind.INTERNAL))
        server.error(req_id, kind, str(exc) or type(exc).__name__)


def message_marks(rt: Runtime, spec: dict[str, Any], prompt: list[int]) -> tuple[int, ...]:
    """Where a chat request's prompt ends its first message (a system prompt, a document) and where its last
    message starts: the prefixes other requests share (another question on the same document, an edit of the
    last message). Non-dense models only (dense ones cut anywhere): two extra renders of the template."""
    messages = spec.get("messages")
    if rt.keeper.dense or not isinstance(messages, list) or len(messages) < 2:
        return ()
    marks = set()
    for k in {1, len(messages) - 1}:
        head = rt.prompt_tokens({"messages": messages[:k], "add_generation_prompt": False,
                                 "tools": spec.get("tools"), "template_kwargs": spec.get("template_kwargs")})
        marks.add(common_prefix(head, prompt))
    return tuple(sorted(m for m in marks if 0 < m < len(prompt) - 1))
