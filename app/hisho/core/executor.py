"""The one way work leaves the caller's thread: named single-thread lanes with success/failure callbacks. No Qt.

Rules of use (Anki's single-owner executors, Picard's named pools):
- A *lane* is one worker thread with a purpose. ``engine``: everything that talks to the engine (load, token
  counts, replies, KV restore, prefetch, type-ahead; the engine runs one request at a time anyway). ``store``:
  every SQLite write, and the reads the window waits for; it is the database's one writer. ``kv``: waiting for
  KV files the engine writes in the background, so neither other lane blocks on a disk. ``hub``: requests to the
  Hugging Face hub (search, file lists, header reads). ``download``: model downloads, one at a time.
- ``submit(lane, fn, done=, failed=)`` runs ``fn`` on the lane; ``done(result)`` or ``failed(exc)`` then runs
  through ``post``: the GUI passes its bridge (callbacks on the GUI thread); the CLI and tests pass nothing
  (callbacks run on the lane thread right after ``fn``).
- ``key=`` makes a job *latest-wins*: a newer job with the same key replaces one still waiting (type-ahead:
  only the last draft matters). ``delay=`` holds a job back that long (a typing pause) without any thread
  waiting; a newer job with its key cancels it.
- ``call(lane, fn)`` runs ``fn`` on the lane and returns its result to a *worker* thread that must wait for it
  (a reply's text saved from the engine lane through the store lane). On the lane itself it runs inline. Never
  call it from the GUI thread.
- ``idle(lane)`` waits until nothing is queued, held back or running there (tests, benchmarks, app exit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger("hisho.executor")

T = TypeVar("T")
# remote: network waits (probes); measure: the machine's speed at first start (a probe child, seconds)
LANES = ("engine", "store", "kv", "hub", "download", "remote", "measure")
Post = Callable[[Callable[[], None]], None]


def _inline(fn: Callable[[], None]) -> None:
    fn()


class Executor:
    """Named single-thread lanes. Thread-safe; make one per app (the composition root does)."""

    def __init__(self, post: Post | None = None, lanes: tuple[str, ...] = LANES,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self.post: Post = post or _inline
        self.on_error = on_error  # failures of jobs submitted without ``failed=`` (else they are logged)
        self._pools = {lane: ThreadPoolExecutor(1, thread_name_prefix=f"hisho-{lane}") for lane in lanes}
        self._threads: dict[str, int | None] = {lane: None for lane in lanes}
        self._busy = {lane: 0 for lane in lanes}
        self._keyed: dict[tuple[str, str], _Job] = {}
        self._cv = threading.Condition()
        self.closed = False

    # ----- submitting -------------------------------------------------------------------------------------

    def submit(self, lane: str, fn: Callable[[], T], *, done: Callable[[T], Any] | None = None,
               failed: Callable[[BaseException], Any] | None = None, key: str | None = None,
               delay: float = 0.0, _must: bool = False) -> Future[T]:
        """Run ``fn`` on ``lane``; then ``done(result)`` or ``failed(exc)`` through ``post``. Returns a Future
        of ``fn``'s result (cancelled if the executor is closed, or the job was replaced by a newer ``key``)."""
        if lane not in self._pools:
            raise ValueError(f"unknown lane {lane!r}")
        future: Future[T] = Future()
        job = _Job(self, lane, fn, done, failed, future)
        job.must = _must
        with self._cv:
            if self.closed:  # the app is closing: late timers and clicks start nothing
                future.cancel()
                return future
            self._busy[lane] += 1
            if key is not None:
                old = self._keyed.get((lane, key))
                if old is not None:
                    old.drop()
                self._keyed[(lane, key)] = job
                job.key = key
        if delay > 0:
            job.timer = threading.Timer(delay, job.start)
            job.timer.daemon = True
            job.timer.start()
        else:
            job.start()
        return future

    def call(self, lane: str, fn: Callable[[], T], timeout: float | None = None) -> T:
        """Run ``fn`` on ``lane`` and wait for its result (worker threads only; inline on the lane itself)."""
        if self.on_lane(lane) or self.closed:
            return fn()  # closing: the caller (a reply being saved) must still be able to finish
        future = self.submit(lane, fn, _must=True)
        if future.cancelled():  # closed in between
            return fn()
        return future.result(timeout)

    def on_lane(self, lane: str) -> bool:
        return self._threads.get(lane) == threading.get_ident()

    # ----- state ------------------------------------------------------------------------------------------

    def busy(self, lane: str) -> bool:
        with self._cv:
            return self._busy[lane] > 0

    def idle(self, lane: str, timeout: float = 30.0) -> bool:
        """Wait until ``lane`` has nothing queued, held back, running or waiting for its callback. Not on the
        thread ``post`` delivers to (the GUI thread) while callbacks may be pending: they could not run."""
        with self._cv:
            return self._cv.wait_for(lambda: self._busy[lane] == 0, timeout)

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop taking work, drop what waits (except ``call``s a worker waits on), and wait up to ``timeout`` s
        in all for running jobs. False if one is still running (a second call waits for it again)."""
        with self._cv:
            self.closed = True
            keyed = list(self._keyed.values())
        for job in keyed:
            job.drop()
        done = True
        deadline = time.monotonic() + timeout
        for lane, pool in self._pools.items():
            pool.shutdown(wait=False)  # queued jobs are dropped by _Job._run, ``call``s still run
            # ThreadPoolExecutor has no timed shutdown; join its threads ourselves.
            for t in list(getattr(pool, "_threads", ())):
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    log.warning("%s lane still busy after %.1fs at shutdown", lane, timeout)
                    done = False
        return done

    # ----- internals --------------------------------------------------------------------------------------

    def _finished(self, lane: str) -> None:
        with self._cv:
            self._busy[lane] -= 1
            self._cv.notify_all()


class _Job:
    """One submitted job: its callbacks, its optional key and delay timer."""

    def __init__(self, ex: Executor, lane: str, fn: Callable[[], Any], done: Callable[[Any], Any] | None,
                 failed: Callable[[BaseException], Any] | None, future: Future[Any]) -> None:
        self.ex, self.lane, self.fn, self.done, self.failed, self.future = ex, lane, fn, done, failed, future
        self.key: str | None = None
        self.timer: threading.Timer | None = None
        self.must = False  # a ``call``: someone waits for it, so it runs even after shutdown
        self._claimed = False  # started or dropped: exactly one of the two happens
        self._lock = threading.Lock()

    def _claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def drop(self) -> None:
        """Replaced by a newer job with the same key, or the executor closed, before it started."""
        if self.timer is not None:
            self.timer.cancel()
        if self._claim():
            self.future.cancel()
            self._forget()
            self.ex._finished(self.lane)

    def start(self) -> None:
        try:
            self.ex._pools[self.lane].submit(self._run)
        except RuntimeError:  # the pool shut down while a delayed job waited
            self.drop()

    def _forget(self) -> None:
        if self.key is not None:
            with self.ex._cv:
                if self.ex._keyed.get((self.lane, self.key)) is self:
                    del self.ex._keyed[(self.lane, self.key)]

    def _run(self) -> None:
        if not self._claim():
            return  # dropped while it waited in the lane's queue
        self._forget()
        if self.ex.closed and not self.must:
            self.future.cancel()
            self.ex._finished(self.lane)
            return
        self.ex._threads[self.lane] = threading.get_ident()
        if not self.future.set_running_or_notify_cancel():
            self.ex._finished(self.lane)
            return
        try:
            result = self.fn()
        except BaseException as exc:  # noqa: B036 - handed to the failure path, never swallowed
            self.future.set_exception(exc)
            handler = self.failed or self.ex.on_error
            if handler is None:
                log.error("%s job failed: %s", self.lane, exc, exc_info=exc)
                self.ex._finished(self.lane)
            else:
                self._follow_up(handler, exc)
            return
        self.future.set_result(result)
        if self.done is None:
            self.ex._finished(self.lane)
        else:
            self._follow_up(self.done, result)

    def _follow_up(self, fn: Callable[[Any], Any], value: Any) -> None:
        # The lane counts as busy until its follow-up has run, so "idle" means nothing is left in flight (a
        # follow-up usually submits the next step before it returns).
        def run() -> None:
            try:
                fn(value)
            except Exception:
                log.exception("callback of a %s job failed", self.lane)
            finally:
                self.ex._finished(self.lane)

        try:
            self.ex.post(run)
        except Exception:
            log.exception("could not hand a %s job's result back", self.lane)
            self.ex._finished(self.lane)
