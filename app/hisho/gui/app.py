"""``hisho gui``: the QApplication, the theme (following the system unless set), the context and the window.

``run_app`` is the entry point (cli.py calls it). ``open_window`` is the same without the event loop, for tests
and the screenshot script.
"""

from __future__ import annotations

import logging
import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from hisho.core import logs
from hisho.gui import theme
from hisho.gui.bridge import Bridge
from hisho.gui.context import AppContext, build
from hisho.gui.main_window import MainWindow

log = logging.getLogger("hisho.gui")


def application() -> QApplication:
    app = QApplication.instance()
    if isinstance(app, QApplication):
        return app
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication(sys.argv[:1])
    app.setApplicationName("Hisho")
    app.setApplicationDisplayName("Hisho")
    app.setOrganizationName("Hisho")
    return app


def open_window(model: str | None = None, *, bridge: Bridge | None = None) -> MainWindow:
    """Build the context and the window (not shown). The engine starts loading when the window is shown."""
    app = application()
    ctx: AppContext = build(model, bridge=bridge or Bridge())
    wanted = str(ctx.settings["theme"])
    theme.apply(app, theme.choose(wanted))
    window = MainWindow(ctx)
    if wanted == "system":
        hints = QGuiApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):  # Qt >= 6.5; re-render so code colours follow too
            hints.colorSchemeChanged.connect(window.controller.follow_system_theme)
    kv = ctx.kv
    if kv is not None:  # KV persistence: prefetch on select, type-ahead while typing, size in the status bar
        from hisho.gui.kv_status import wire

        wire(window, kv)
    return window


def run_app(model: str | None = None) -> int:
    logs.setup()
    app = application()
    window = open_window(model)
    window.show()
    code = int(app.exec())
    window.controller.shutdown()
    window.ctx.close()  # KV saves in flight are written and indexed before the database closes
    return code
