"""The one place results come back onto the GUI thread.

Rules of use (napari's ``ensure_main_thread``):
- Long work runs on the app executor's named lanes (``hisho.core.executor``, made by the composition root with
  ``post=bridge.post``), reached through the op layer (``hisho.gui.ops``: ``ops.database(ex, fn).success(done)
  .run()``): ``fn`` runs on the lane of what it touches, then ``done(result)`` or ``failed(exc)`` on the GUI
  thread through this ``Bridge``. Widgets never start threads.
- ``Bridge.post(fn)`` may be called from any thread; ``fn`` runs later on the GUI thread. If the bridge is gone
  (window closed), posted callables are dropped.
- Streaming text does not go through the bridge token by token: it has one owner, the running ``Turn``
  (``hisho.core.conversations.chat``), and the chat view reads ``turn.text`` on a display-rate timer (``gui/chat/sending.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot

log = logging.getLogger("hisho.gui")


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
