"""The app's one state (``hisho.core.appstate``) as a Qt signal, on the GUI thread.

Rules of use: one ``StateBridge`` per window (``MainWindow.state``). Screens read ``bridge.now`` when they are
built or shown and connect ``bridge.changed`` (a ``Now``, on the GUI thread) to follow a load, a switch, a
connect, a new reply's speeds or the engine's queue (``now.queue``); none keeps its own copy of which model
answers. Only the composition root changes the state; the bridge only carries it across threads (napari's
``ensure_main_thread``, through the window's one ``Bridge``).
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from hisho.core.appstate import AppState, Now
from hisho.core.executor import Post

log = logging.getLogger("hisho.gui")


class StateBridge(QObject):
    """Create on the GUI thread; ``post`` must run its callables there (the window's bridge does)."""

    changed = Signal(object)   # Now

    def __init__(self, state: AppState, post: Post, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._post = post
        unsubscribe = state.subscribe(self._changed_anywhere)
        self.destroyed.connect(lambda *_: unsubscribe())

    @property
    def now(self) -> Now:
        return self.state.now

    def _changed_anywhere(self, now: Now) -> None:
        """The root changed the state (any thread): say it on the GUI thread."""
        self._post(lambda: self._emit(now))

    def _emit(self, now: Now) -> None:
        try:
            self.changed.emit(now)
        except RuntimeError:  # the window is gone: nothing left to show it on
            log.debug("dropped a state change after the window closed")
