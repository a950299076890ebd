"""``hisho gui``: the QApplication, the theme (following the system unless set), the context and the window.

``run_app`` is the entry point (cli/main.py calls it). SIGTERM and SIGINT (a logout, ``kill``, Ctrl+C in the
terminal that started it) close the window as its close button does: the draft and the reply so far are saved, KV
saves land, the engine and the API stop (``quit_on_signals``). ``open_window`` is the same without the event loop, for tests
and the screenshot script. A failure before the window is up is never a silent exit: ``startup_failed`` writes
the traceback to the log and says so in a message box (one stderr line where there is no display); Qt's own
fatal messages (a platform plugin that cannot load) reach the log through a message handler first.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from functools import partial
from typing import Any

from PySide6.QtCore import QEvent, QObject, QSocketNotifier, Qt, QtMsgType, qInstallMessageHandler
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from hisho.core import logs, paths
from hisho.gui.shell import theme
from hisho.gui.shell.bridge import Bridge
from hisho.gui.shell.context import AppContext, build
from hisho.gui.shell.main_window import MainWindow
from hisho.gui.shell.single import FirstInstance

log = logging.getLogger("hisho.gui")

_KEPT: list[object] = []  # quit_on_signals' sockets and notifier


def application() -> QApplication:
    app = QApplication.instance()
    if isinstance(app, QApplication):
        return app
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication(sys.argv[:1])
    app.setApplicationName("Hisho")
    app.setApplicationDisplayName("Hisho")
    app.setOrganizationName("Hisho")
    app.setDesktopFileName("hisho")  # Wayland/X11 match the window to hisho.desktop (its icon, its name)
    app.setWindowIcon(QIcon(str(paths.resources_dir() / "icons" / "hisho.svg")))
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
        from hisho.gui.chat.kv_status import wire

        wire(window, kv)
    return window


def run_app(model: str | None = None) -> int:
    logs.setup()
    qInstallMessageHandler(_qt_message)
    try:
        app = application()
        first = FirstInstance(paths.data_dir(), app)  # listening before the window: a second launch waits for it
        window = open_window(model)
        welcome_second_launches(first, window)
        _report_first_paint(window)
        window.show()
        quit_on_signals(app, window)
    except Exception as exc:
        return startup_failed(exc)
    from hisho.gui.settings.api_page import start_at_launch

    start_at_launch(window)  # Settings → API, if the user turned it on
    code = int(app.exec())
    first.close()
    close(window)
    return code


def quit_on_signals(app: QApplication, window: QWidget) -> None:
    """SIGTERM and SIGINT close ``window`` and end the event loop. Python runs a signal handler only between
    bytecodes, never while Qt's loop waits in C++, so the C-level handler writes to a socket (``set_wakeup_fd``)
    that a socket notifier in the loop reads."""
    ours, theirs = socket.socketpair()  # a socket, not a pipe: Windows' set_wakeup_fd takes only sockets
    for end in (ours, theirs):
        end.setblocking(False)
    signal.set_wakeup_fd(theirs.fileno())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_args: None)  # handled below, once the loop reads the wake-up byte
    notifier = QSocketNotifier(ours.fileno(), QSocketNotifier.Type.Read, app)

    def woken() -> None:
        try:
            got = ours.recv(64)
        except BlockingIOError:
            return
        names = ", ".join(signal.Signals(b).name for b in got if b in signal.valid_signals())
        log.info("quitting on %s", names or "a signal")
        window.close()
        app.quit()

    notifier.activated.connect(woken)
    _KEPT.extend((ours, theirs, notifier))  # alive as long as the process: the fd must outlive the loop


def welcome_second_launches(first: FirstInstance, window: MainWindow) -> None:
    """A second ``hisho gui`` brings ``window`` forward (hisho.gui.shell.single) and is answered in it."""
    first.attach(window)
    first.activated.connect(partial(_second_launch, window))


def _second_launch(window: MainWindow, message: dict[str, Any]) -> None:
    model = message.get("model")
    if model:
        window.controller.toast(f"Hisho was already open; to use {model}, choose it in the model picker")


def close(window: MainWindow) -> None:
    """After the event loop: stop the engine, finish KV saves, close the database; then, if the user asked in
    Settings → Your data, delete their folders (nothing has them open any more)."""
    window.controller.shutdown()
    window.ctx.close()  # KV saves in flight are written and indexed before the database closes
    if getattr(window, "remove_data_on_exit", False):
        logs.close_file()  # the log file is in one of the folders
        for folder in paths.remove_user_data():
            if sys.stderr is not None:
                sys.stderr.write(f"hisho: removed {folder}\n")


def startup_failed(exc: BaseException) -> int:
    """The window could not open: the traceback to the log, the reason to the user. Returns the exit code."""
    reason = f"{type(exc).__name__}: {exc}"
    line = f"the window could not start: {reason} (details in {paths.log_file()})"
    log.critical("%s", line, exc_info=exc)
    if not logs.has_stderr() and sys.stderr is not None:  # a windowed Windows build has no stderr
        sys.stderr.write(f"hisho: error: {line}\n")
    app = QApplication.instance()
    if isinstance(app, QApplication) and QGuiApplication.platformName() not in ("offscreen", "minimal"):
        QMessageBox.critical(None, "Hisho could not start",
                             f"Hisho could not start.\n\n{reason}\n\nThe details are in {paths.log_file()}")
    return 1


def _qt_message(kind: QtMsgType, _context: Any, message: str) -> None:
    level = {QtMsgType.QtFatalMsg: logging.CRITICAL, QtMsgType.QtCriticalMsg: logging.ERROR,
             QtMsgType.QtWarningMsg: logging.WARNING}.get(kind, logging.DEBUG)
    logging.getLogger("hisho.gui.qt").log(level, "%s", message)
    if level >= logging.ERROR and not logs.has_stderr() and sys.stderr is not None:
        sys.stderr.write(f"hisho: Qt: {message}\n")  # Qt aborts after a fatal message: say why where we can


class _FirstPaint(QObject):
    """Writes the wall-clock time of the window's first paint to ``HISHO_FIRST_PAINT_FILE`` (the start-up
    benchmark in packaging/linux/startup-bench.sh compares the installed app with the venv's). Watches the whole
    application until then: the main window itself gets no paint event when its children cover it."""

    def __init__(self, window: QWidget, target: str) -> None:
        super().__init__(window)
        self.window, self.target = window, target

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Paint and isinstance(watched, QWidget) and watched.window() is self.window:
            app = QApplication.instance()
            if app is not None:
                app.removeEventFilter(self)
            with open(self.target, "w", encoding="utf-8") as out:
                out.write(f"{time.time():.6f}\n")
            log.info("first paint written to %s", self.target)
        return False


def _report_first_paint(window: QWidget) -> None:
    target = os.environ.get("HISHO_FIRST_PAINT_FILE")
    app = QApplication.instance()
    if target and app is not None:
        app.installEventFilter(_FirstPaint(window, target))
