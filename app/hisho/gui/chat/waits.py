"""What a send waits for, said while it waits: the engine reading a long prompt ("Reading your message · 37 %"),
and, after a chat was resumed from disk, what that saved ("Restored 2,730 tokens from disk in 0.1 s · saved
~55 s").

Rules of use: ``ReadingWatch(sending)`` is made by ``hisho.gui.chat.sending.Sending``, which starts it when a
message leaves the queue; it polls the engine's latest "progress" (``Engine.progress()``, a read of one value,
GUI thread) every ``TICK_MS`` while a send is starting or a reply has no token yet, and hands the text to the
sending part. ``watch_restores(window, kv)`` once, on the GUI thread: restores run on the engine lane and
their notice comes back through the executor's ``post``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, QTimer

from hisho.core.engine.protocol import Progress
from hisho.core.kv.session import RestoreReport, conversation_owner
from hisho.gui.shell.protocols import HasController

if TYPE_CHECKING:
    from hisho.core.kv.chat_hooks import KVChat

log = logging.getLogger("hisho.gui")

TICK_MS = 200        # how often a wait's progress is read (the engine reports at most every 100 ms)
RESTORE_MS = 9000    # the resume notice stays a little longer than a plain toast


def reading_text(progress: Progress | None, documents: int = 0) -> str:
    """"Reading your message · 37 %" for the engine's latest progress ("… and the attached document" when the
    chat's prompt carries ``documents``); "" when it reports none."""
    if progress is None or progress.total <= 0:
        return ""
    percent = min(99, int(progress.fraction * 100))  # 100 % would be a lie until the first word comes
    what = "your message" if not documents else (
        "your message and the attached document" if documents == 1 else "your message and the attached documents")
    return f"Reading {what} · {percent} %"


def seconds_text(s: float) -> str:
    """"40 ms", "2.7 s", "55 s": a restore is often far under a tenth of a second, and "0.0 s" says nothing."""
    if s < 0.1:
        return f"{max(1.0, s * 1000):.0f} ms"
    return f"{s:.1f} s" if s < 10 else f"{s:,.0f} s"


def restored_text(report: RestoreReport) -> str:
    """The resume notice, from measured figures only: the restore's own time, and the prefill time it saved
    from this computer's measured prefill speed (left out when none was measured for this model yet)."""
    text = f"Restored {report.restored:,} tokens from disk in {seconds_text(report.seconds)}"
    if report.saved_s is not None and report.saved_s >= 0.05:
        text += f" · saved ~{seconds_text(report.saved_s)}"
    return text


class ReadingWatch(QObject):
    """Polls the engine's prompt-reading progress while ``active()`` says a wait is on screen."""

    def __init__(self, parent: QObject, engine: Callable[[], Any], active: Callable[[], bool],
                 show: Callable[[Progress | None], None]) -> None:
        super().__init__(parent)
        self.engine, self._active, self._show = engine, active, show  # engine(): the one answering now
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.tick)

    def progress(self) -> Progress | None:
        read = getattr(self.engine(), "progress", None)  # engines outside this process report none
        return read() if callable(read) else None

    def start(self) -> None:
        if not self._timer.isActive():
            self._timer.start()
        self.tick()

    def tick(self) -> None:
        if not self._active():
            self._timer.stop()
            self._show(None)  # the wait is over: whatever it said goes
            return
        self._show(self.progress())


class RestoreWindow(HasController, Protocol):
    """What the resume notice uses of the window: the chat on screen, a toast, and where it keeps the notice."""

    last_restore_notice: str


def watch_restores(window: RestoreWindow, kv: KVChat) -> None:
    """Say in the chat what a resume from disk saved, when the restored chat is the one on screen."""
    post = window.ctx.executor.post

    def shown(owner: str, report: RestoreReport) -> None:
        cur = window.controller.current
        if cur is None or conversation_owner(cur.id) != owner:
            return
        text = restored_text(report)
        window.last_restore_notice = text
        window.controller.toast(text, ms=RESTORE_MS)
        log.info("%s: %s", owner, text)

    kv.session.on_restore.append(lambda owner, report: post(lambda: shown(owner, report)))
