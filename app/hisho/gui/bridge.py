"""The one worker mechanism and the one place results come back onto the GUI thread.

Rules of use (Anki's single-owner executors, napari's ``ensure_main_thread``):
- Long work runs on a named *lane*, a single worker thread: ``engine`` (everything that talks to the engine:
  load, tokenize, generate; the engine runs one request at a time anyway) and ``store`` (SQLite reads and
  writes that the window waits for: search, listing, export, import), ``hub`` (requests to the Hugging Face hub:
  search, file lists, header reads) and ``download`` (model downloads, one at a time).
- ``Workers.submit(lane, fn, done=..., failed=...)`` runs ``fn`` on the lane; ``done(result)`` or
  ``failed(exc)`` then runs on the GUI thread through the ``Bridge``. Widgets never start threads.
- ``Bridge.post(fn)`` may be called from any thread; ``fn`` runs later on the GUI thread. If the bridge is gone
  (window closed), posted callables are dropped.
- Streaming text does not go through the bridge token by token: the producer appends to a ``TextBuffer`` and
  the view drains it on a display-rate timer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal, Slot

log = logging.getLogger("hisho.gui")

T = TypeVar("T")
LANES = ("engine", "store", "hub", "download")


class Bridge(QObject):
    """Create on the GUI thread. ``post`` from anywhere; the callable runs on the GUI thread."""

    _posted = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, fn: Callable[[], Any]) -> None:
        try:
            self._posted.emit(fn)
        except RuntimeError:  # the C++ object is gone: the window closed; nothing left to update
            log.debug("dropped a GUI callback after shutdown")

    @Slot(object)
    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception:
            log.exception("GUI callback failed")


class Workers:
    """Named single-thread lanes whose results come back through ``bridge``."""

    def __init__(self, bridge: Bridge, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.bridge = bridge
        self.on_error = on_error
        self._pools = {lane: ThreadPoolExecutor(1, thread_name_prefix=f"hisho-{lane}") for lane in LANES}
        self._busy = {lane: 0 for lane in LANES}
        self._lock = threading.Lock()
        self.closed = False

    def submit(self, lane: str, fn: Callable[[], T], *, done: Callable[[T], Any] | None = None,
               failed: Callable[[BaseException], Any] | None = None) -> Future[T]:
        with self._lock:
            if self.closed:  # the window is closing: late timers and clicks start nothing
                dropped: Future[T] = Future()
                dropped.cancel()
                return dropped
            self._busy[lane] += 1
        future = self._pools[lane].submit(fn)

        def finished(f: Future[T]) -> None:
            if f.cancelled():
                self._done(lane)
                return
            exc = f.exception()
            if exc is not None:
                handler = failed or self.on_error
                if handler is None:
                    log.error("%s job failed: %s", lane, exc, exc_info=exc)
                    self._done(lane)
                else:
                    self.bridge.post(lambda: self._follow_up(lane, handler, exc))
            elif done is not None:
                result = f.result()
                self.bridge.post(lambda: self._follow_up(lane, done, result))
            else:
                self._done(lane)

        future.add_done_callback(finished)
        return future

    def _follow_up(self, lane: str, fn: Callable[[Any], Any], value: Any) -> None:
        # The lane counts as busy until its GUI follow-up has run, so "idle" means nothing is left in flight
        # (a follow-up usually submits the next step before this returns).
        try:
            fn(value)
        finally:
            self._done(lane)

    def _done(self, lane: str) -> None:
        with self._lock:
            self._busy[lane] -= 1

    def busy(self, lane: str) -> bool:
        with self._lock:
            return self._busy[lane] > 0

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop taking work and wait up to ``timeout`` s for running jobs. Returns False if one is still running."""
        done = True
        with self._lock:
            self.closed = True
        for lane, pool in self._pools.items():
            pool.shutdown(wait=False, cancel_futures=True)
            # ThreadPoolExecutor has no timed shutdown; join its threads ourselves.
            for t in list(getattr(pool, "_threads", ())):
                t.join(timeout)
                if t.is_alive():
                    log.warning("%s lane still busy after %.1fs at shutdown", lane, timeout)
                    done = False
        return done


class TextBuffer:
    """Pieces of streamed text from a producer thread, drained by the GUI at display rate."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def append(self, piece: str) -> None:
        with self._lock:
            self._parts.append(piece)

    def take(self) -> str:
        with self._lock:
            text, self._parts = "".join(self._parts), []
        return text
