"""The API's queue: requests waiting while the engine works on something sent before them. No Qt, no I/O.

The engine runs requests in the order they were sent (a serving batch lets the window's turns and quick ops in
between its steps, and puts a load or a summary off until its requests are done). An API request sent while the
window's engine is on a summary, a reply or a model load therefore gets nothing back until that work ends. This
module makes that wait visible and bounded.

Rules of use:
- ``WaitQueue(max_wait_s)``; ``enter()`` when a request is admitted, ``leave(ticket)`` once the engine is on it
  (nothing it waits behind is left), has answered, or the request is refused or gone. ``snapshot()`` is what
  ``/health`` and the window's status bar show. Thread-safe (the window reads it on the GUI thread).
  ``on_change(waiting)`` (optional) is told each new count, on the thread that changed it.
- ``behind(engine, before)`` says what the request waits behind: the oldest request in flight that was sent
  before request id ``before`` (None: before anything sent from now on) and is not itself an API request or a
  quick op. An engine that does not report its requests (a remote one) has nothing to wait behind: its own
  server queues.
- ``busy_error(...)`` is the refusal: 503 ``engine_busy`` with ``Retry-After``.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from hisho.api.shapes import ApiError

# A KV save holds the engine only for its in-memory copy: it stays in flight until its files are written in the
# background, while the engine goes on with what comes next.
BACKGROUND = frozenset({"state_save"})
# Ops that never hold a request up for long (token counts), those in the background, and the API's own requests
# (the serving batch takes every one of those in at its next step; one waiting for a free sequence is the
# per-key queue's, ``Admission``).
NOT_WORK = frozenset({"serve", "tokenize", "detokenize", "kv_info", "seq_rm", "hello"}) | BACKGROUND

# What ``/health`` calls the engine's work, by op ("idle" when nothing is in flight).
ACTIVITY = {"load": "loading a model", "unload": "unloading a model", "batch_generate": "summary",
            "generate": "reply", "serve": "api", "prefill": "reading a prompt", "state_save": "saving kv",
            "state_load": "restoring kv", "kv_flush": "saving kv"}


def in_flight(engine: Any) -> list[tuple[int, str, float]]:
    """The engine's requests in flight, oldest first ([] for an engine that does not say)."""
    activity = getattr(engine, "activity", None)
    return list(activity()) if callable(activity) else []


def running(engine: Any) -> str:
    """What the engine works on now, in ``/health``'s words."""
    ops = [op for _, op, _ in in_flight(engine)]
    if not ops:
        return "idle"
    op = next((op for op in ops if op not in BACKGROUND), ops[0])
    return ACTIVITY.get(op, op)


def behind(engine: Any, before: int | None = None) -> tuple[str, float] | None:
    """(op, when it was sent) of the work the request ``before`` waits behind, or None."""
    for rid, op, at in in_flight(engine):
        if before is not None and rid >= before:
            return None
        if op not in NOT_WORK:
            return op, at
    return None


def retry_after(engine: Any, work: tuple[str, float] | None, bound: float) -> int:
    """Seconds a client should wait before it tries again: what is left of the work ahead when the engine
    reports how far it is (``progress``), else the bound; 1 to 60."""
    estimate = bound
    progress = getattr(engine, "progress", None)
    p = progress() if callable(progress) else None
    if work is not None and p is not None and p.op == work[0] and 0 < p.done < p.total:
        elapsed = time.monotonic() - work[1]
        estimate = elapsed * (p.total - p.done) / p.done
    return max(1, min(60, math.ceil(estimate)))


def busy_error(what: str, waited: float, retry: int) -> ApiError:
    return ApiError(503, f"the engine is busy ({what}); this request waited {waited:.0f} s, the longest this server "
                         f"lets a request wait (Settings → API); retry in {retry} s",
                    type_="server_error", code="engine_busy", headers={"Retry-After": str(retry)})


class WaitQueue:
    """Requests waiting behind the engine's other work (see the module docstring)."""

    def __init__(self, max_wait_s: float, on_change: Callable[[int], None] | None = None) -> None:
        self.max_wait_s = max_wait_s
        self.on_change = on_change
        self.refused = 0  # requests answered 503 because their wait passed the bound
        self._tickets = itertools.count(1)
        self._since: dict[int, float] = {}
        self._lock = threading.Lock()

    def enter(self) -> int:
        with self._lock:
            ticket = next(self._tickets)
            self._since[ticket] = time.monotonic()
            waiting = len(self._since)
        self._changed(waiting)
        return ticket

    def leave(self, ticket: int) -> None:
        with self._lock:
            left = self._since.pop(ticket, None) is not None
            waiting = len(self._since)
        if left:   # a request leaves once; its second leave (the ``finally``) changes nothing
            self._changed(waiting)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._since)

    def _changed(self, waiting: int) -> None:
        if self.on_change is not None:
            self.on_change(waiting)

    def waited(self, ticket: int) -> float:
        with self._lock:
            since = self._since.get(ticket)
        return 0.0 if since is None else time.monotonic() - since

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            waiting, oldest = len(self._since), min(self._since.values(), default=None)
        return {"waiting": waiting,
                "oldest_wait_s": round(time.monotonic() - oldest, 1) if oldest is not None else 0.0,
                "max_wait_s": self.max_wait_s, "refused": self.refused}
