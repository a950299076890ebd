"""Settings → Performance: how many CPU threads the engine uses (the ``n_threads`` setting).

"Automatic" (0, the default) lets the engine choose per step, by measurement: all physical cores on a quiet
machine, fewer while other programs keep the cores busy (hisho.engine.lib.threads, docs/threads.md). A number fixes
it. One line says what automatic chose for the last reply and why; it refreshes while the page is shown.

Rules of use: GUI thread only. It reads ``EngineClient.threads`` (a dict the engine reports with each reply,
replaced whole) and never calls the engine; the setting is saved on the store worker and used at the next load.
"""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QWidget

from hisho.core import settings as settings_mod
from hisho.gui import ops
from hisho.gui.settings.settings_page import page_layout
from hisho.gui.shell.protocols import HasContext

REFRESH_MS = 1000


def describe(threads: dict[str, Any], setting: int) -> str:
    """One line for the page: what the thread policy chose for replies and why."""
    decode = threads.get("decode") or {}
    if setting > 0:
        return f"Replies use {setting} thread{'s' * (setting > 1)}, as set here."
    if not decode or not decode.get("automatic", True):
        return "Automatic: chosen while a reply runs (no reply yet with this setting)."
    n, most = int(decode.get("threads", 0)), int(decode.get("max", 0))
    line = f"Automatic chose {n} of {most} threads for the last reply: {decode.get('why', '')}."
    prefill = threads.get("prefill") or {}
    if prefill.get("changes") and prefill.get("threads") != n:
        line += f" Reading prompts: {prefill.get('threads')} threads."
    return line


def status_suffix(threads: dict[str, Any]) -> str:
    """What the status bar adds to a reply's tok/s when automatic used fewer threads than it could: the speed
    is then the machine's (other programs took cores), not the model's."""
    decode = threads.get("decode") or {}
    if decode.get("automatic") and int(decode.get("threads", 0)) < int(decode.get("max", 0)):
        return f" · {decode['threads']}/{decode['max']} threads (CPU busy)"
    return ""


class PerformancePage(QWidget):
    """The page; ``window`` gives ``ctx.settings``, ``ctx.engine`` and ``ctx.executor``."""

    def __init__(self, window: HasContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.settings: settings_mod.Settings = window.ctx.settings
        lay = page_layout(self, "Performance",
                          "Hisho runs the model on your CPU. When other programs keep the cores busy, a model "
                          "that uses all of them waits for the busy ones at every step and slows to a crawl; "
                          "automatic then uses fewer threads, and all of them again once the cores are free.")
        self.threads = QComboBox()
        self.threads.setObjectName("ThreadsChoice")
        self.threads.addItem("Automatic (recommended)", 0)
        for n in range(1, (os.cpu_count() or 1) + 1):
            self.threads.addItem(f"{n} thread{'s' * (n > 1)}", n)
        current = int(self.settings["n_threads"])
        if self.threads.findData(current) < 0:
            self.threads.addItem(f"{current} threads", current)
        self.threads.setCurrentIndex(self.threads.findData(current))
        self.threads.currentIndexChanged.connect(lambda _i: self.apply())
        self.threads.setFixedWidth(260)
        note = QLabel("Applies the next time a model is loaded.")
        note.setObjectName("Meta")
        self.chose = QLabel("")
        self.chose.setObjectName("ThreadsChose")
        self.chose.setWordWrap(True)
        form = QFormLayout()
        form.setSpacing(10)
        form.addRow("CPU threads", self.threads)
        form.addRow("", note)
        form.addRow("Now", self.chose)
        lay.addLayout(form)
        lay.addStretch(1)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self.refresh()

    def refresh(self) -> None:
        if self.isVisible() or not self.chose.text():
            # The built-in engine's client reports its thread choices; a remote engine has none to report.
            threads = getattr(self.w.ctx.engine, "threads", None) or {}
            self.chose.setText(describe(dict(threads), int(self.settings["n_threads"])))

    def apply(self) -> None:
        n = int(self.threads.currentData())
        if n == self.settings["n_threads"]:
            return
        self.settings.set("n_threads", n)
        ops.save_settings(self.w.ctx.executor, self.settings).run()
        self.refresh()
