"""What the app calls to keep KV on disk: restore on send, save after a turn, prefetch, type-ahead. No Qt.

Rules of use:
- ``KVSession(engine)`` wraps an ``Engine`` with ``Capability.KV_STATE`` (``hisho.core.engine.seam``) whose
  model is loaded with ``n_seq_max >= 2`` (the last sequence is the scratch sequence chunked saves need; with
  one sequence every save is a single chunk). Chats live in sequence ``seq`` (0).
- ``restore(owner, tokens)`` runs on the caller's thread right before ``generate``; it returns quickly when the
  engine already holds the prefix (same conversation, prefetched or typed ahead). A bad file never fails a
  send: it is removed, logged, and the prompt simply prefills.
- Work goes to the app's ``Executor`` (``hisho.core.executor``; a session made without one gets its own):
  ``prefetch`` and type-ahead ``draft`` run on the ``engine`` lane (in order, so a draft is prefilled after the
  prefetch it builds on; only the latest draft matters: older ones are dropped, and the template's suffix
  waits for a typing pause as a delayed job, not a waiting thread). ``save(owner)`` returns after the engine
  has copied the state in memory; the ``kv`` lane waits for the files, then the index is written on the
  ``store`` lane, the database's one writer. Every index write goes through ``store``.
- Lane order that keeps this deadlock-free: ``engine`` and ``kv`` may wait for ``store``; ``store`` never waits
  for another lane.
- Owners are strings: ``conversation_owner(id)``, ``document_owner(id)``. Deleting an owner deletes its files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.engine.ops import StateLoad, StateSave
from hisho.core.engine.protocol import common_prefix
from hisho.core.engine.seam import Engine
from hisho.core.errors import EngineError, UserError
from hisho.core.executor import Executor
from hisho.core.kv.index import KVIndex
from hisho.core.kv.usage import Usage

log = logging.getLogger("hisho.kv")

DEFAULT_CHUNK_TOKENS = 512  # docs/kv-format.md: restore speed is the same from 1 to 16 chunks
PAUSE_S = 0.4  # typing pause after which the end-of-turn and assistant header are appended speculatively


def conversation_owner(conversation_id: int) -> str:
    return f"conv:{conversation_id}"


def document_owner(document_id: int | str) -> str:
    return f"doc:{document_id}"


def suffix_length(tokens_for: Callable[[str], list[int]]) -> int:
    """Tokens the chat template puts after a user message (end-of-turn + assistant header): the common tail
    of two prompts that differ only in the user's text. ``tokens_for(text)`` renders and tokenizes."""
    a, b = tokens_for("Alpha 1"), tokens_for("Beta words 2")
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def next_turn_prefix(tokens_for: Callable[[str], list[int]]) -> list[int]:
    """The tokens every next prompt of a conversation starts with, whatever the user writes: the conversation so
    far, the end of the assistant's turn and the user header of the chat template (ChatML: ``<|im_end|>\n
    <|im_start|>user\n``). The common head of two prompts that differ only in the user's text."""
    a = tokens_for("Alpha 1")
    return a[:common_prefix(a, tokens_for("Beta words 2"))]


@dataclass
class RestoreReport:
    restored: int = 0         # tokens the engine holds for this prompt after the call
    loaded_bytes: int = 0
    seconds: float = 0.0
    skipped: bool = False     # the engine already held the prefix
    failed: int = 0           # chunk files found bad (removed)
    engine_s: float = 0.0     # inside the engine: read + verify + load into llama.cpp
    # Prefill time avoided minus the restore, from this computer's measured prefill speed for the model; None
    # when none was measured yet (then nothing is claimed).
    saved_s: float | None = None

    @property
    def from_disk(self) -> bool:
        return self.restored > 0 and not self.skipped and self.loaded_bytes > 0


class KVSession:
    """KV persistence for one engine. Thread-safe; its work runs on the executor's lanes (module docstring)."""

    def __init__(self, engine: Engine, index: KVIndex | None = None, *, seq: int = 0,
                 chunk_tokens: int = DEFAULT_CHUNK_TOKENS, budget_bytes: int | None = None,
                 kv_dir: Path | None = None, executor: Executor | None = None) -> None:
        self.engine = engine
        self.kv_dir = kv_dir or (index.kv_dir if index else paths.kv_dir())
        self.index = index or KVIndex(kv_dir=self.kv_dir)
        self.seq = seq
        self.chunk_tokens = chunk_tokens
        self.budget_bytes = budget_bytes if budget_bytes is not None else _budget_setting()
        self.executor = executor or Executor()
        self._own_executor = executor is None
        self._fp: str | None = None
        self._fp_params: Any = None
        self.last_save: dict[str, Any] = {}  # the last save's engine report: copy_s (what the reply waited), bytes
        self._closed = False
        self._draft_key = f"kv-typeahead-{id(self)}"
        self.on_change: list[Callable[[], None]] = []  # after a save, delete, eviction or clear (any thread)
        # After a restore that read KV from disk: (owner, report), on the thread that restored (the engine lane).
        self.on_restore: list[Callable[[str, RestoreReport], None]] = []

    # ----- engine facts ---------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """The engine's state fingerprint, asked again whenever the engine's load parameters change."""
        params = self.engine.load_params
        if self._fp is None or params != self._fp_params:
            self._fp = str(self.engine.kv_info()["fingerprint"])
            self._fp_params = params
        return self._fp

    def reset(self) -> None:
        self._fp = None

    def prepare(self, n_bytes: int) -> None:
        """Allocate and touch the engine's restore buffer now (after a load), not on the first restore."""
        self._fp = str(self.engine.kv_info(prepare_bytes=int(n_bytes))["fingerprint"])
        self._fp_params = self.engine.load_params

    # ----- restore ----------------------------------------------------------------------------------------

    def restore(self, owner: str, tokens: Sequence[int]) -> RestoreReport:
        """Make the engine's sequence hold the longest saved prefix of ``tokens``. Never raises for a bad file.
        Runs on the caller's thread (the engine lane); its index updates run on the store lane, waited for."""
        start = time.perf_counter()
        fp = self.fingerprint()
        match = self.index.lookup(fp, tokens)
        if not match.chunks:
            # Nothing on disk (yet: the save of what the engine just read may still be on its way to the index),
            # but the sequence may hold the prefix: an empty restore says how much of it (nothing is loaded).
            res = self.engine.state_load(StateLoad(seq=self.seq, chunks=[], keep=0, tokens=list(tokens)))
            held = int(res.get("restored", 0))
            return RestoreReport(held, seconds=time.perf_counter() - start, skipped=held > 0)
        res = self.engine.state_load(StateLoad(seq=self.seq, chunks=match.request(), keep=match.keep,
                                               tokens=list(tokens)))
        seconds = time.perf_counter() - start
        failed = list(res.get("failed", []))
        keys = [c["key"] for c in match.chunks]

        def record() -> None:
            for bad in failed:
                log.warning("KV file for %s is bad (%s); removed, prefilling instead", owner, bad.get("reason"))
                self.index.remove_chunk(str(bad.get("key")), str(bad.get("reason")))
            self.index.touch(owner, keys)
            if res.get("bytes") and not res.get("skipped"):
                self.index.record_speed(fp, restore_bytes_s=res["bytes"] / max(seconds, 1e-6))

        self._write(record)  # before returning, as callers read the index next (engine lane may wait for store)
        engine_s = sum(float(res.get(k, 0.0)) for k in ("read_s", "verify_s", "set_s"))
        report = RestoreReport(int(res.get("restored", 0)), int(res.get("bytes", 0)), seconds,
                               bool(res.get("skipped")), len(failed), engine_s)
        if report.from_disk:
            speed = self.index.prefill_speed(fp)
            if speed:
                report.saved_s = max(0.0, report.restored / speed - seconds)
            for fn in list(self.on_restore):
                try:
                    fn(owner, report)
                except Exception:
                    log.exception("KV restore listener failed")
        return report

    def prefetch(self, owner: str, tokens: Sequence[int]) -> None:
        """Restore in the background (a conversation was selected); the next send finds it in memory."""
        toks = list(tokens)
        self.submit(lambda: self.restore(owner, toks), lane="engine")

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the work queued so far on the engine, kv and store lanes has run (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        return all(self.executor.idle(lane, max(0.0, deadline - time.monotonic()))
                   for lane in ("engine", "kv", "store"))

    def submit(self, job: Callable[[], Any], lane: str = "store") -> None:
        """Run ``job`` on ``lane`` (errors are logged, never raised): ``store`` for index reads and writes,
        ``engine`` for anything that talks to the engine. Nothing runs after ``close()``: a late job would
        restart an engine the app just shut down."""
        if not self._closed:
            self.executor.submit(lane, lambda: self.quietly(job) if not self._closed else None)

    def _write(self, fn: Callable[[], Any]) -> Any:
        """Run an index write on the store lane and wait for it (kv / engine lanes only)."""
        return self.executor.call("store", fn)

    # ----- save -------------------------------------------------------------------------------------------

    def save(self, owner: str, on_done: Callable[[int], None] | None = None,
             test_hooks: dict[str, Any] | None = None, *, pinned: bool | None = None) -> None:
        """Save what the engine's sequence holds now for ``owner``. Returns once the engine copied the state;
        ``on_done(saved_tokens)`` runs on the kv lane after the files are written and indexed.
        ``pinned`` (if given) marks the owner as evicted last when the disk budget is exceeded."""
        stream = self.engine.state_save(StateSave(seq=self.seq, dir=str(self.kv_dir),
                                                  chunk_tokens=self.chunk_tokens, test_hooks=test_hooks or None))
        self.executor.submit("kv", lambda: self._finish_save(owner, stream, on_done, pinned))

    def _finish_save(self, owner: str, stream: Any, on_done: Callable[[int], None] | None,
                     pinned: bool | None) -> None:
        saved = 0
        chunks: list[dict[str, Any]] = []
        try:
            report = stream.collect().extra
            self.last_save = {k: v for k, v in report.items() if k != "chunks"}
            fp = str(report["fingerprint"])
            chunks = list(report.get("chunks", []))
            for c in chunks:
                if c.get("error"):
                    log.warning("KV save for %s incomplete: %s", owner, c["error"])

            def record() -> int:
                n = self.index.record_save(owner, fp, chunks, report.get("model"))
                if pinned is not None:
                    self.index.set_pinned(owner, pinned)
                self.index.evict(self.budget_bytes)
                return n

            saved = int(self._write(record))
        except (EngineError, UserError) as exc:  # UserError: the index database is on a full disk
            log.warning("KV save for %s failed: %s", owner, exc)
        except Exception:
            log.exception("KV save for %s failed", owner)
        drop_unrecorded(owner, chunks, saved)
        self.changed()
        if on_done is not None:
            on_done(saved)

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait for saves in flight to be written and indexed (app exit, tests). True if all finished. On the
        kv lane itself there is nothing earlier left to wait for."""
        if self.executor.on_lane("kv"):
            return True
        return self.executor.idle("kv", timeout)

    # ----- type-ahead -------------------------------------------------------------------------------------

    def draft(self, tokens: Sequence[int], suffix: int = 0) -> None:
        """The user's draft changed: ``tokens`` is the prompt Send would use (ending with the template's
        ``suffix`` tokens of end-of-turn + assistant header). Prefill the draft now, the suffix once typing
        pauses for ``PAUSE_S``; Send then costs one decode step. Latest call wins: a newer draft replaces a
        waiting one and cancels the held-back suffix."""
        full = list(tokens)
        suffix = max(0, suffix)
        head = full[:-suffix] if suffix else full
        self._submit_draft(head, "")
        if suffix:
            self._submit_draft(full, "-pause", PAUSE_S)
        else:
            self._submit_draft(full, "-pause", 0.0, cancel_only=True)

    def _submit_draft(self, tokens: list[int], tag: str, delay: float = 0.0, cancel_only: bool = False) -> None:
        if self._closed:
            return
        job = (lambda: None) if cancel_only else (lambda: self.quietly(self._prefill_draft, tokens))
        self.executor.submit("engine", job, key=self._draft_key + tag, delay=delay)

    def _prefill_draft(self, tokens: list[int]) -> None:
        """Type-ahead prefill; a complete one is a measurement of this model's prefill speed here."""
        res = self.engine.prefill(tokens, self.seq)
        if res.get("complete"):
            self.record_prefill(int(res.get("decoded", 0)), float(res.get("seconds", 0.0)))

    def drop_drafts(self) -> None:
        """The user stopped the reading of a draft: type-ahead jobs not started yet are dropped (the one
        running is the engine's to cancel)."""
        for tag in ("", "-pause"):
            self._submit_draft([], tag, cancel_only=True)

    def wait_drafted(self, timeout: float = 30.0) -> bool:
        """Wait until the latest draft (with its suffix) is prefilled (tests and benchmarks)."""
        return self.executor.idle("engine", timeout)

    # ----- bookkeeping ------------------------------------------------------------------------------------

    def delete(self, owner: str) -> int:
        """Delete ``owner``'s KV files (a conversation or document was deleted). Returns bytes freed."""
        freed = self.index.delete_owner(owner)
        self.changed()
        return freed

    def set_budget(self, budget_bytes: int) -> list[str]:
        """A new disk budget: evict down to it now (call on the store lane: ``submit``). Returns owners
        dropped."""
        self.budget_bytes = int(budget_bytes)
        dropped = self.index.evict(self.budget_bytes)
        self.changed()
        return dropped

    def clear(self) -> int:
        """Delete every KV file once saves in flight have landed (the user's "Clear all"). Returns bytes.
        Call it off the store lane (``submit(session.clear, lane="kv")``): it waits for the kv lane."""
        self.flush()
        freed = int(self._write(self.index.clear))
        self.changed()
        return freed

    def changed(self) -> None:
        """Tell ``on_change`` listeners that what is stored changed (they must only hand work to their thread)."""
        for fn in list(self.on_change):
            try:
                fn()
            except Exception:
                log.exception("KV change listener failed")

    def usage(self, owner: str) -> Usage:
        return self.index.usage(owner)

    def record_prefill(self, new_tokens: int, seconds: float) -> None:
        """Feed a measured prefill (a send that prefilled ``new_tokens``) into the seconds-saved estimate."""
        if new_tokens >= 256 and seconds > 0:
            fp = self.fingerprint()
            self.submit(lambda: self.index.record_speed(fp, prefill_tok_s=new_tokens / seconds))

    def close(self, timeout: float = 60.0) -> None:
        """Wait for saves in flight, then take no more work (and stop the executor if the session made it).
        Safe to call twice."""
        if self._closed:
            return
        self.flush(timeout)  # a save's index writes are done when its kv job is (it waits for them)
        self._closed = True
        if self._own_executor:
            self.executor.shutdown(timeout)

    def quietly(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except EngineError as exc:
            log.info("KV background step skipped: %s", exc)
        except Exception:
            log.exception("KV background step failed")


def _budget_setting() -> int:
    from hisho.core import settings

    return int(settings.load()["kv_disk_budget_bytes"])


def drop_unrecorded(owner: str, chunks: list[dict[str, Any]], saved_tokens: int) -> int:
    """Remove the chunk files this save wrote that the index did not take: the chunks after
    a hole (an earlier chunk hit ENOSPC and a smaller later one still fit) and every chunk when the index write
    itself failed. Unindexed, they would only take disk space until the next ``reconcile``. Files this save did
    not write (already there, maybe another owner's) are never touched. Returns the number removed."""
    removed = 0
    for c in chunks:
        if not c.get("written") or int(c["start"]) + int(c["n_tokens"]) <= saved_tokens:
            continue
        try:
            Path(str(c["path"])).unlink(missing_ok=True)
            removed += 1
        except OSError as exc:
            log.warning("KV chunk %s of a failed save not removed: %s", c["path"], exc)
    if removed:
        log.warning("KV save for %s: removed %d chunk file(s) the index did not take", owner, removed)
    return removed
