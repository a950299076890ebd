"""What answers now: the app's one state, for every screen and front end to read. No Qt.

Anki's ``Collection`` is the one place its window asks "what is open"; this is ours for "what answers": the
model (its id and display name, its file when local), the engine (this computer or a remote one by name), the
context and KV type it was loaded with, and how fast it answered last. A screen that kept its own copy of
"which model is loaded" disagreed with the next screen (chat settings naming one model, the header another);
a screen that reads this cannot.

Rules of use:
- The composition root (``hisho.core.services``) owns the one ``AppState`` and is the only writer: on start,
  load, switch, connect and disconnect, and after each reply (the measured speeds). Nothing else calls the
  methods that change it.
- Readers take ``state.now`` (an immutable ``Now``; any thread) or ``subscribe(fn)``: ``fn(now)`` runs on the
  writer's thread (usually the ``engine`` lane) after every change, so a GUI moves it onto its own thread in one
  place (``gui/shell/state_bridge.py``). A subscriber's exception is logged, never the writer's problem.
- A change of model or engine clears the speeds: the last model's tok/s are not the next one's.
- ``now.queue`` says what the engine works on and what waits for it ("summarizing report.pdf · 2 waiting").
  The root writes it too, in its own methods (``working`` around a load) and through callbacks it hands out and
  owns: ``Documents.working`` (a summary, documents being attached) and the API backend's ``on_queue``
  (``api/launch.py``: requests running, requests waiting behind other work, ``api/waits.py``). A change of
  model keeps the queue: the work goes on.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hisho.core.models.names import NO_MODEL, ModelName

log = logging.getLogger("hisho.state")


@dataclass(frozen=True)
class Queue:
    """What the engine works on and what waits for it. ``jobs``: the app's own engine work under way, oldest
    first, in words ("loading Qwen3-4B", "summarizing report.pdf"); the first runs, the others wait for the
    engine. ``api_running`` / ``api_waiting``: API requests the engine is on / that wait behind other work."""

    jobs: tuple[str, ...] = ()
    api_running: int = 0
    api_waiting: int = 0

    @property
    def idle(self) -> bool:
        return not (self.jobs or self.api_running or self.api_waiting)

    @property
    def waiting(self) -> int:
        return max(0, len(self.jobs) - 1) + self.api_waiting

    @property
    def label(self) -> str:
        """One short line, the app's work first, then the API's as ``/health`` counts it: "summarizing
        report.pdf · 1 more waiting", "API: 2 requests running, 1 waiting", "loading Qwen3-4B · API: 1 request
        waiting"; "" when idle."""
        parts = []
        if self.jobs:
            more = len(self.jobs) - 1
            parts.append(self.jobs[0] + (f" · {more} more waiting" if more else ""))
        if self.api_running or self.api_waiting:
            parts.append(api_words(self.api_running, self.api_waiting))
        return " · ".join(parts)


def api_words(running: int, waiting: int) -> str:
    """The API's requests in words: ``running`` on the engine, ``waiting`` behind other work."""
    if not running:
        return f"API: {waiting} request{'s' * (waiting != 1)} waiting"
    return f"API: {running} request{'s' * (running != 1)} running" + (f", {waiting} waiting" if waiting else "")


IDLE = Queue()


@dataclass(frozen=True)
class Now:
    """One moment of the app's state. ``engine``: the remote engine's name ("" for this computer); ``path``: the
    local model's file ("" when remote or none); ``loaded``: it answers (False while it loads, or when nothing
    could be loaded); ``base``: a base model (it continues text rather than answering it); ``failed``: why
    nothing could be loaded ("" unless the last load, switch or start-up plan failed); ``connecting``: the remote
    engine being connected to ("" when none; what answered before still does until it answers)."""

    model: ModelName = NO_MODEL
    path: str = ""
    engine: str = ""
    n_ctx: int = 0
    kv_type: str = ""
    loaded: bool = False
    loading: bool = False
    base: bool = False
    failed: str = ""
    connecting: str = ""
    tokens_per_s: float | None = None
    ttft_s: float | None = None
    queue: Queue = field(default=IDLE)

    @property
    def remote(self) -> bool:
        return bool(self.engine)

    @property
    def ready(self) -> bool:
        """A message may be sent now: a model answers and no other engine is being connected in its place."""
        return self.loaded and not self.connecting

    @property
    def key(self) -> str:
        """What answers, as one string: the local file, or ``remote:<engine>:<model>``."""
        return f"remote:{self.engine}:{self.model.id}" if self.engine else self.path


Watcher = Callable[[Now], None]


class AppState:
    """The app's one state (see the module's rules: the root writes, everyone reads)."""

    def __init__(self, now: Now | None = None) -> None:
        self._now = now or Now()
        self._lock = threading.Lock()
        self._watchers: list[Watcher] = []
        self._jobs: dict[int, str] = {}   # the root's engine work under way, by ticket (oldest first)
        self._tickets = itertools.count(1)

    @property
    def now(self) -> Now:
        with self._lock:
            return self._now

    def subscribe(self, fn: Watcher) -> Callable[[], None]:
        """Call ``fn(now)`` after every change, on the writer's thread; returns the unsubscribe."""
        with self._lock:
            self._watchers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._watchers:
                    self._watchers.remove(fn)

        return unsubscribe

    # ----- the root's writes -----------------------------------------------------------------------------

    def chosen(self, model: ModelName, path: str) -> None:
        """The model picked at start-up, not loaded yet."""
        self._set(Now(model=model, path=path))

    def loading(self, model: ModelName | None = None, path: str | None = None) -> None:
        """A load has begun (``model``: the one asked for, else the one shown stays); nothing answers until it
        ends, and the last reply's speeds are no longer this model's."""
        now = self.now
        self._set(Now(model=model or now.model, path=now.path if path is None else path, loading=True))

    def answering(self, model: ModelName, *, path: str = "", engine: str = "", n_ctx: int = 0,
                  kv_type: str = "", base: bool = False) -> None:
        """``model`` answers now (local when ``engine`` is empty), no speeds measured yet."""
        self._set(Now(model=model, path=path, engine=engine, n_ctx=n_ctx, kv_type=kv_type, loaded=True,
                      base=base))

    def unloaded(self, model: ModelName | None = None, path: str | None = None) -> None:
        """Nothing answers (a load failed or was stopped with nothing to go back to)."""
        now = self.now
        self._set(Now(model=model or now.model, path=now.path if path is None else path))

    def failed(self, reason: str, model: ModelName | None = None, path: str | None = None) -> None:
        """Nothing answers, and ``reason`` says why (a load or a switch failed, or start-up found nothing to
        load)."""
        now = self.now
        self._set(Now(model=model or now.model, path=now.path if path is None else path,
                      failed=reason or "no model to load"))

    def connecting(self, engine: str) -> None:
        """A remote ``engine`` is being connected to ("": that attempt ended); what answered before still does
        until it answers in its place."""
        with self._lock:
            now = dataclasses.replace(self._now, connecting=engine)
        self._set(now)

    def measured(self, tokens_per_s: float | None, ttft_s: float | None) -> None:
        """The last reply's speeds, for the model answering now."""
        with self._lock:
            now = dataclasses.replace(self._now, tokens_per_s=tokens_per_s, ttft_s=ttft_s)
        self._set(now)

    # ----- the queue (the root's own work, and the callbacks it owns) --------------------------------------

    @contextmanager
    def working(self, what: str) -> Iterator[None]:
        """``what`` is engine work under way until the block ends (whatever way it ends)."""
        with self._lock:
            ticket = next(self._tickets)
            self._jobs[ticket] = what
        self._set_queue(jobs=True)
        try:
            yield
        finally:
            with self._lock:
                self._jobs.pop(ticket, None)
            self._set_queue(jobs=True)

    def api_queue(self, running: int, waiting: int) -> None:
        """The API's requests: ``running`` on the engine, ``waiting`` behind other work (any thread)."""
        self._set_queue(api=(max(0, running), max(0, waiting)))

    def _set_queue(self, *, jobs: bool = False, api: tuple[int, int] | None = None) -> None:
        with self._lock:
            queue = self._now.queue
            if jobs:
                queue = dataclasses.replace(queue, jobs=tuple(self._jobs.values()))
            if api is not None:
                queue = dataclasses.replace(queue, api_running=api[0], api_waiting=api[1])
            if queue == self._now.queue:
                return
            now = self._now = dataclasses.replace(self._now, queue=queue)
            watchers = list(self._watchers)
        self._tell(watchers, now)

    def _set(self, now: Now) -> None:
        """A new model state; the queue goes on (a load does not end the work waiting for the engine)."""
        with self._lock:
            now = self._now = dataclasses.replace(now, queue=self._now.queue)
            watchers = list(self._watchers)
        self._tell(watchers, now)

    @staticmethod
    def _tell(watchers: list[Watcher], now: Now) -> None:
        for fn in watchers:
            try:
                fn(now)
            except Exception:
                log.exception("a state watcher failed")
