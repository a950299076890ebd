"""KV persistence in the window: wiring of the window's signals to ``hisho.core.kv_chat.KVChat`` and a status-bar
label with what the open conversation's saved KV costs on disk and saves on resume.

Rules of use: ``wire(window, kv)`` once, on the GUI thread. Usage figures are computed on the session's worker
and posted back through the window's bridge (the one place that moves results onto the GUI thread).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QLabel

from hisho.core.kv_chat import KVChat


def describe(n_bytes: int, seconds_saved: float) -> str:
    if n_bytes <= 0:
        return "KV not saved yet"
    size = f"{n_bytes / 2**20:.0f} MB" if n_bytes >= 2**20 else f"{n_bytes / 1024:.0f} KB"
    return f"KV {size} · resumes ~{seconds_saved:.0f} s faster" if seconds_saved >= 1 else f"KV {size}"


class _CloseWatcher(QObject):
    """Closes the KV session before the window's own close handler stops the engine: saves in flight land,
    and no background KV job can restart the engine afterwards."""

    def __init__(self, window: Any, kv: KVChat) -> None:
        super().__init__(window)
        self._kv = kv

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if event.type() == QEvent.Type.Close:
            self._kv.close()
        return False


def wire(window: Any, kv: KVChat) -> QLabel:
    """Connect select / draft / delete / turn-finished to the KV session; return the status-bar label."""
    label = QLabel("")
    label.setToolTip("This chat's saved KV cache on disk, and the prefill time it saves when you come back to it.\n"
                     "Shared prefixes (the same document in several chats) are stored once.")
    window.status.addPermanentWidget(label)
    post = window.ctx.bridge.post

    def show(cid: int) -> None:
        def job() -> None:
            usage = kv.usage(cid)
            text = describe(usage.bytes, usage.seconds_saved)
            post(lambda: label.setText(text))
        kv.session.submit(job)

    def turn_done(result: Any) -> None:
        cid = result.turn.conversation_id
        kv.session.submit(lambda: kv.session.flush(30))  # the save of this turn lands first
        show(cid)

    window.conversation_selected.connect(kv.selected)
    window.conversation_selected.connect(show)
    window.draft_changed.connect(kv.draft)
    window.sidebar.delete_requested.connect(kv.deleted)
    window.sidebar.pin_requested.connect(kv.pinned)
    window.turn_finished.connect(turn_done)
    window.installEventFilter(_CloseWatcher(window, kv))
    return label
