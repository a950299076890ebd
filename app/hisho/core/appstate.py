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
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from hisho.core.models.names import NO_MODEL, ModelName

log = logging.getLogger("hisho.state")


@dataclass(frozen=True)
class Now:
    """One moment of the app's state. ``engine``: the remote engine's name ("" for this computer); ``path``: the
    local model's file ("" when remote or none); ``loaded``: it answers (False while it loads, or when nothing
    could be loaded); ``base``: a base model (it continues text rather than answering it)."""

    model: ModelName = NO_MODEL
    path: str = ""
    engine: str = ""
    n_ctx: int = 0
    kv_type: str = ""
    loaded: bool = False
    loading: bool = False
    base: bool = False
    tokens_per_s: float | None = None
    ttft_s: float | None = None

    @property
    def remote(self) -> bool:
        return bool(self.engine)

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

    def measured(self, tokens_per_s: float | None, ttft_s: float | None) -> None:
        """The last reply's speeds, for the model answering now."""
        with self._lock:
            now = dataclasses.replace(self._now, tokens_per_s=tokens_per_s, ttft_s=ttft_s)
        self._set(now)

    def _set(self, now: Now) -> None:
        with self._lock:
            self._now = now
            watchers = list(self._watchers)
        for fn in watchers:
            try:
                fn(now)
            except Exception:
                log.exception("a state watcher failed")
