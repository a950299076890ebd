"""What the app calls to keep KV on disk: restore on send, save after a turn, prefetch, type-ahead. No Qt.

Rules of use:
- ``KVSession(engine)`` wraps an ``EngineClient`` (or anything with ``call``/``stream``/``tokenize``) whose
  model is loaded with ``n_seq_max >= 2`` (the last sequence is the scratch sequence chunked saves need; with
  one sequence every save is a single chunk). Chats live in sequence ``seq`` (0).
- ``restore(owner, tokens)`` runs on the caller's thread right before ``generate``; it returns quickly when the
  engine already holds the prefix (same conversation, prefetched or typed ahead). A bad file never fails a
  send: it is removed, logged, and the prompt simply prefills.
- ``save(owner)`` returns after the engine has copied the state in memory; files are written and indexed in
  the background. ``prefetch`` and ``draft`` run on the session's one worker thread; only the latest
  draft matters (older ones are dropped, not queued).
- Owners are strings: ``conversation_owner(id)``, ``document_owner(id)``. Deleting an owner deletes its files.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hisho.core import paths
from hisho.core.errors import EngineError
from hisho.core.kv.index import KVIndex, Usage
from hisho.core.protocol import common_prefix

log = logging.getLogger("hisho.kv")

DEFAULT_CHUNK_TOKENS = 512  # docs/kv-format.md: restore speed is the same from 1 to 16 chunks
PAUSE_S = 0.4  # typing pause after which the end-of-turn and assistant header are appended speculatively


class EngineLike(Protocol):
    def call(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]: ...
    def stream(self, op: str, params: dict[str, Any]) -> Any: ...


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


class KVSession:
    """KV persistence for one engine. Thread-safe; one background worker for prefetch and type-ahead."""

    def __init__(self, engine: EngineLike, index: KVIndex | None = None, *, seq: int = 0,
                 chunk_tokens: int = DEFAULT_CHUNK_TOKENS, budget_bytes: int | None = None,
                 kv_dir: Path | None = None) -> None:
        self.engine = engine
        self.kv_dir = kv_dir or (index.kv_dir if index else paths.kv_dir())
        self.index = index or KVIndex(kv_dir=self.kv_dir)
        self.seq = seq
        self.chunk_tokens = chunk_tokens
        self.budget_bytes = budget_bytes if budget_bytes is not None else _budget_setting()
        self._fp: str | None = None
        self._fp_params: Any = None
        self.last_save: dict[str, Any] = {}  # the last save's engine report: copy_s (what the reply waited), bytes
        self._saves: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._draft: tuple[list[int], int, float] | None = None
        self._draft_cv = threading.Condition()
        self._closed = False
        self._working = False  # the worker runs a job (a prefetch): type-ahead waits for it
        self.on_change: list[Callable[[], None]] = []  # after a save, delete, eviction or clear (any thread)
        self._worker = threading.Thread(target=self._work, name="hisho-kv-session", daemon=True)
        self._worker.start()
        self._drafter = threading.Thread(target=self._draft_loop, name="hisho-kv-typeahead", daemon=True)
        self._drafter.start()

    # ----- engine facts ---------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """The engine's state fingerprint, asked again whenever the engine's load parameters change."""
        params = getattr(self.engine, "load_params", None)
        if self._fp is None or params != self._fp_params:
            self._fp = str(self.engine.call("kv_info", {})["fingerprint"])
            self._fp_params = params
        return self._fp

    def reset(self) -> None:
        self._fp = None

    def prepare(self, n_bytes: int) -> None:
        """Allocate and touch the engine's restore buffer now (after a load), not on the first restore."""
        self._fp = str(self.engine.call("kv_info", {"prepare_bytes": int(n_bytes)})["fingerprint"])
        self._fp_params = getattr(self.engine, "load_params", None)

    # ----- restore ----------------------------------------------------------------------------------------

    def restore(self, owner: str, tokens: Sequence[int]) -> RestoreReport:
        """Make the engine's sequence hold the longest saved prefix of ``tokens``. Never raises for a bad file."""
        start = time.perf_counter()
        fp = self.fingerprint()
        match = self.index.lookup(fp, tokens)
        if not match.chunks:
            return RestoreReport(seconds=time.perf_counter() - start)
        res = self.engine.call("state_load", {"seq": self.seq, "chunks": match.request(), "keep": match.keep,
                                              "tokens": list(tokens)})
        for bad in res.get("failed", []):
            log.warning("KV file for %s is bad (%s); removed, prefilling instead", owner, bad.get("reason"))
            self.index.remove_chunk(str(bad.get("key")), str(bad.get("reason")))
        self.index.touch(owner, [c["key"] for c in match.chunks])
        seconds = time.perf_counter() - start
        if res.get("bytes") and not res.get("skipped"):
            self.index.record_speed(fp, restore_bytes_s=res["bytes"] / max(seconds, 1e-6))
        engine_s = sum(float(res.get(k, 0.0)) for k in ("read_s", "verify_s", "set_s"))
        return RestoreReport(int(res.get("restored", 0)), int(res.get("bytes", 0)), seconds,
                             bool(res.get("skipped")), len(res.get("failed", [])), engine_s)

    def prefetch(self, owner: str, tokens: Sequence[int]) -> None:
        """Restore in the background (a conversation was selected); the next send finds it in memory."""
        toks = list(tokens)
        self.submit(lambda: self.restore(owner, toks))

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the background jobs queued so far have run (tests, benchmarks)."""
        done = threading.Event()
        self._jobs.put(done.set)
        return done.wait(timeout)

    def submit(self, job: Callable[[], Any]) -> None:
        """Run ``job`` on the session's background worker (errors are logged, never raised). Nothing runs
        after ``close()``: a late job would restart an engine the app just shut down."""
        if not self._closed:
            self._jobs.put(lambda: self._quietly(job) if not self._closed else None)

    # ----- save -------------------------------------------------------------------------------------------

    def save(self, owner: str, on_done: Callable[[int], None] | None = None,
             test_hooks: dict[str, Any] | None = None, *, pinned: bool | None = None) -> None:
        """Save what the engine's sequence holds now for ``owner``. Returns once the engine copied the state;
        ``on_done(saved_tokens)`` runs on a background thread after the files are written and indexed.
        ``pinned`` (if given) marks the owner as evicted last when the disk budget is exceeded."""
        params: dict[str, Any] = {"seq": self.seq, "dir": str(self.kv_dir), "chunk_tokens": self.chunk_tokens}
        if test_hooks:
            params["test_hooks"] = test_hooks
        stream = self.engine.stream("state_save", params)
        thread = threading.Thread(target=self._finish_save, args=(owner, stream, on_done, pinned),
                                  name="hisho-kv-save", daemon=True)
        with self._lock:
            self._saves = [t for t in self._saves if t.is_alive()] + [thread]
        thread.start()

    def _finish_save(self, owner: str, stream: Any, on_done: Callable[[int], None] | None,
                     pinned: bool | None) -> None:
        saved = 0
        try:
            report = stream.collect().extra
            self.last_save = {k: v for k, v in report.items() if k != "chunks"}
            fp = str(report["fingerprint"])
            saved = self.index.record_save(owner, fp, report.get("chunks", []))
            if pinned is not None:
                self.index.set_pinned(owner, pinned)
            for c in report.get("chunks", []):
                if c.get("error"):
                    log.warning("KV save for %s incomplete: %s", owner, c["error"])
            self.index.evict(self.budget_bytes)
        except EngineError as exc:
            log.warning("KV save for %s failed: %s", owner, exc)
        except Exception:
            log.exception("KV save for %s failed", owner)
        self.changed()
        if on_done is not None:
            on_done(saved)

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait for saves in flight (app exit, tests). True if all finished."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._saves)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    # ----- type-ahead -------------------------------------------------------------------------------------

    def draft(self, tokens: Sequence[int], suffix: int = 0) -> None:
        """The user's draft changed: ``tokens`` is the prompt Send would use (ending with the template's
        ``suffix`` tokens of end-of-turn + assistant header). Prefill the draft now, the suffix once typing
        pauses for ``PAUSE_S``; Send then costs one decode step. Latest call wins."""
        with self._draft_cv:
            self._draft = (list(tokens), max(0, suffix), time.monotonic())
            self._draft_cv.notify()

    def wait_drafted(self, timeout: float = 30.0) -> bool:
        """Wait until the latest draft (with its suffix) is prefilled (tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        with self._draft_cv:
            while self._draft is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._draft_cv.wait(min(left, 0.05))
        return True

    def _draft_loop(self) -> None:
        done_len = -1
        while True:
            with self._draft_cv:
                while self._draft is None and not self._closed:
                    self._draft_cv.wait()
                if self._closed:
                    return
                assert self._draft is not None
                tokens, suffix, at = self._draft
                paused = time.monotonic() - at >= PAUSE_S
                target = tokens if paused or not suffix else tokens[:-suffix]
            while (self._working or not self._jobs.empty()) and not self._closed:
                time.sleep(0.005)  # a prefetch first: prefilling the draft before it would redo everything
            if len(target) != done_len or paused:
                self._quietly(self.engine.call, "prefill", {"seq": self.seq, "tokens": target})
                done_len = len(target)
            with self._draft_cv:
                if self._draft is not None and self._draft[2] == at:
                    if paused or not suffix:
                        self._draft = None  # fully prefilled; nothing left until the next keystroke
                        self._draft_cv.notify_all()
                    else:
                        self._draft_cv.wait(max(0.0, PAUSE_S - (time.monotonic() - at)))

    # ----- bookkeeping ------------------------------------------------------------------------------------

    def delete(self, owner: str) -> int:
        """Delete ``owner``'s KV files (a conversation or document was deleted). Returns bytes freed."""
        freed = self.index.delete_owner(owner)
        self.changed()
        return freed

    def set_budget(self, budget_bytes: int) -> list[str]:
        """A new disk budget: evict down to it now (call on the worker: ``submit``). Returns owners dropped."""
        self.budget_bytes = int(budget_bytes)
        dropped = self.index.evict(self.budget_bytes)
        self.changed()
        return dropped

    def clear(self) -> int:
        """Delete every KV file once saves in flight have landed (the user's "Clear all"). Returns bytes."""
        self.flush()
        freed = self.index.clear()
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
            self.index.record_speed(self.fingerprint(), prefill_tok_s=new_tokens / seconds)

    def close(self, timeout: float = 60.0) -> None:
        """Wait for saves in flight, then stop the background threads. Safe to call twice."""
        if self._closed:
            return
        self.flush(timeout)
        with self._draft_cv:
            self._closed = True
            self._draft_cv.notify_all()
        self._jobs.put(None)

    # ----- worker -----------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._working = True
            try:
                job()
            finally:
                self._working = False

    def _quietly(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except EngineError as exc:
            log.info("KV background step skipped: %s", exc)
        except Exception:
            log.exception("KV background step failed")


def _budget_setting() -> int:
    from hisho.core import settings

    return int(settings.load()["kv_disk_budget_bytes"])
