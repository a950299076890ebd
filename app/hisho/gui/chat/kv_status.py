"""KV persistence in the window: wiring of the window's signals to ``hisho.core.kv.chat_hooks.KVChat``, the sidebar's
per-chat badges ("12 MB · 9 s") and a status-bar label for the open chat.

Rules of use: ``wire(window, kv)`` once, on the GUI thread. Usage figures are computed on the executor's store
lane (one SQL query for every chat: ``hisho.core.kv.stored.conversation_usage``) and come back to the GUI thread
as the job's ``done`` callback (``hisho.core.executor``). They are recomputed whenever the session reports
a change (a save landed, a chat's KV was deleted, eviction, Clear all), at most once per ``REFRESH_MS``.

Attribution (the same on the settings page): a chunk shared by several chats (the same document) counts in full
for each of them; the disk total counts it once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QEvent, QObject, QTimer, SignalInstance
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.stored import conversation_usage
from hisho.core.kv.usage import Usage
from hisho.core.units import format_bytes
from hisho.gui import ops
from hisho.gui.chat.waits import RestoreWindow, watch_restores
from hisho.gui.shell.protocols import HasContext
from hisho.gui.shell.widgets import ElidedLabel

if TYPE_CHECKING:
    from hisho.gui.chat.sidebar import Sidebar

log = logging.getLogger("hisho.gui")

REFRESH_MS = 150

EXPLAIN = ("Saved KV cache: the model's memory of this chat, kept on disk so that coming back to it does not "
           "re-read the whole conversation.")


def human_seconds(s: float) -> str:
    if s < 1:
        return "<1 s"
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min"


NOT_MEASURED = ("Time saved: not measured yet for this model on this computer (it is measured the next time "
                "a long message is read).")


def describe(n_bytes: int, seconds_saved: float, measured: bool = True) -> str:
    """The status-bar text for the open chat; seconds only from a measured prefill speed."""
    if n_bytes <= 0:
        return "KV not saved yet"
    size = format_bytes(n_bytes)
    return f"KV {size} · resumes ~{seconds_saved:.0f} s faster" if measured and seconds_saved >= 1 else f"KV {size}"


def badge(usage: Usage | None) -> tuple[str, str]:
    """(badge text, tooltip) of a sidebar row: "KV 12 MiB · saves 9 s" (seconds from this computer's measured
    prefill speed for the model; only the size while none is measured), or no badge when nothing is saved."""
    if usage is None or usage.bytes <= 0:
        return "", "KV cache: not saved. The next reply re-reads the whole conversation."
    shared = usage.bytes - usage.own_bytes
    saves = (f"Resuming it saves about {human_seconds(usage.seconds_saved)} of reading the conversation "
             "(from this computer's measured prefill speed for this model)." if usage.measured else NOT_MEASURED)
    lines = [EXPLAIN,
             f"{format_bytes(usage.bytes)} on disk for {usage.n_tokens:,} tokens"
             + (f" ({format_bytes(shared)} of it shared with other chats or documents, stored once)." if shared
                else "."),
             saves,
             "Pinned chats are kept longest when the disk budget is full." if usage.pinned else
             "Least recently used chats are evicted first when the disk budget is full."]
    text = f"KV {format_bytes(usage.bytes)}"
    if usage.measured:
        text += f" · saves {human_seconds(usage.seconds_saved)}"
    return text, "\n".join(lines)


class UsageWindow(HasContext, Protocol):
    """What the usage figures use of the window: the executor, the sidebar's badges, a parent (``window()``)."""

    @property
    def sidebar(self) -> Sidebar: ...

    def window(self) -> QWidget: ...


class KVWindow(UsageWindow, RestoreWindow, Protocol):
    """What ``wire`` connects: the window's signals, its status bar, its close; where it keeps the figures."""

    kv_usage: KVUsageView | None

    @property
    def status(self) -> QStatusBar: ...

    @property
    def conversation_selected(self) -> SignalInstance: ...

    @property
    def draft_changed(self) -> SignalInstance: ...

    @property
    def turn_finished(self) -> SignalInstance: ...

    def installEventFilter(self, filter_obj: QObject, /) -> None: ...  # noqa: N802 - Qt naming


class _CloseWatcher(QObject):
    """Closes the KV session before the window's own close handler stops the engine: saves in flight land,
    and no background KV job can restart the engine afterwards."""

    def __init__(self, window: QObject, kv: KVChat) -> None:
        super().__init__(window)
        self._kv = kv

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if event.type() == QEvent.Type.Close:
            self._kv.close()
        return False


class KVUsageView(QObject):
    """Keeps the sidebar badges and the status label in step with what the KV store holds."""

    def __init__(self, window: UsageWindow, kv: KVChat, label: QLabel) -> None:
        super().__init__(window.window())
        self.w, self.kv, self.label = window, kv, label
        self.current: int | None = None
        self.usage: dict[int, Usage] = {}
        self.refreshes = 0  # how many results reached the GUI (tests wait on it)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._compute)
        post = window.ctx.executor.post
        kv.session.on_change.append(lambda: post(self.schedule))  # any thread: only hand over to the GUI

    def schedule(self) -> None:
        self._timer.start()

    def show(self, cid: int) -> None:
        self.current = cid
        self._show_label()
        self.schedule()

    def _compute(self) -> None:
        index = self.kv.session.index
        ops.database(self.w.ctx.executor, lambda: conversation_usage(index)).success(self._apply) \
            .failure(lambda exc: log.warning("KV usage not computed: %s", exc)).run()

    def _apply(self, usage: dict[int, Usage]) -> None:
        self.usage = usage
        self.w.sidebar.set_kv({cid: badge(u) for cid, u in usage.items()}, badge(None))
        self._show_label()
        self.refreshes += 1

    def _show_label(self) -> None:
        u = self.usage.get(self.current) if self.current is not None else None
        self.label.setText(describe(u.bytes, u.seconds_saved, u.measured) if u else "KV not saved yet")


def wire(window: KVWindow, kv: KVChat) -> QLabel:
    """Connect select / draft / delete / pin / turn-finished to the KV session; return the status-bar label."""
    label = ElidedLabel("", 6)  # elides rather than widening the window
    label.setToolTip("This chat's saved KV cache on disk, and the prefill time it saves when you come back to it.\n"
                     "Shared prefixes (the same document in several chats) are stored once.")
    window.status.addPermanentWidget(label)
    view = KVUsageView(window, kv, label)
    window.kv_usage = view

    def turn_done(result: Any) -> None:
        view.show(result.turn.conversation_id)  # recomputed again when the turn's save lands (on_change)

    window.conversation_selected.connect(kv.selected)
    window.conversation_selected.connect(view.show)
    window.draft_changed.connect(kv.draft)
    window.sidebar.delete_requested.connect(kv.deleted)
    window.sidebar.pin_requested.connect(kv.pinned)
    window.turn_finished.connect(turn_done)
    window.installEventFilter(_CloseWatcher(window.window(), kv))
    view.schedule()  # first figures, after the start-up repair queued on the same worker
    watch_restores(window, kv)  # "Restored 2,730 tokens from disk in 0.1 s · saved ~55 s"
    return label
