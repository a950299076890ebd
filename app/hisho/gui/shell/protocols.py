"""What the window's parts may use of the main window, as narrow ``Protocol``s shared by several modules.

A part that plugs into the window (a settings page, the remote switch, the pages' builders) names here, or
beside itself when it alone uses it, exactly what it reads or writes of the window; mypy checks at each call
that ``MainWindow`` has it. A part then cannot come to depend on the rest of the window unnoticed, and a test
can hand it anything that has those members.

Where a part needs the window as a Qt parent (of a dialog, a page, a helper QObject) it asks for ``window()``:
``QWidget.window()`` of the main window is the main window itself (it is top-level).

Private names (``_api_label``…) are things a part keeps on the window for the window's life; ``MainWindow``
declares each one so that these Protocols can name it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QLabel, QMessageBox, QStatusBar, QWidget

if TYPE_CHECKING:
    from hisho.core.appstate import Now
    from hisho.gui.chat.sidebar import Sidebar
    from hisho.gui.shell.context import AppContext
    from hisho.gui.shell.controller import ChatController
    from hisho.gui.shell.state_bridge import StateBridge
    from hisho.gui.shell.status_bar import StatusBar


TOAST_MS = 8000   # how long a toast stays unless its caller says otherwise (``show_toast``'s ``ms``)


class HasContext(Protocol):
    """The app's services (``AppContext``): settings, the executor's lanes, the engine."""

    @property
    def ctx(self) -> AppContext: ...


class HasState(HasContext, Protocol):
    """The services and the app's one state on the GUI thread (``state.now``, ``state.changed``): what
    answers now, for a screen to show and follow instead of keeping its own copy."""

    @property
    def state(self) -> StateBridge: ...


class HasController(HasContext, Protocol):
    """The services and the chat presenter (toasts, errors, engine jobs, the chat on screen)."""

    @property
    def controller(self) -> ChatController: ...


class ApiWindow(HasState, Protocol):
    """Settings → API: its label in the status bar (the server itself is the root's: ``ctx.served``)."""

    _api_label: QLabel | None

    def statusBar(self) -> QStatusBar: ...  # noqa: N802 - Qt naming


class DataWindow(Protocol):
    """Settings → Your data: "remove my data" closes the window and asks for the folders to go after it."""

    remove_data_on_exit: bool

    def close(self) -> bool: ...

    def window(self) -> QWidget: ...


class SettingsWindow(ApiWindow, DataWindow, Protocol):
    """The Settings page and every section on it (``window()``: the page's parent)."""


class RemoteWindow(HasController, HasState, Protocol):
    """Switching between the local engine and a remote one: what it shows where, and its dialog."""

    _cache_shown: bool                 # the status bar follows a remote server's cache figures (connected once)
    _remote_help: QMessageBox | None   # "start it there with…", kept while open

    @property
    def status(self) -> StatusBar: ...

    @property
    def model_label(self) -> QLabel: ...

    @property
    def empty_subtitle(self) -> QLabel: ...

    def show_state(self, now: Now) -> None: ...   # what answers now: the header, the status bar

    @property
    def sidebar(self) -> Sidebar: ...

    @property
    def turn_finished(self) -> SignalInstance: ...

    def show_banner(self, text: str) -> None: ...

    def window(self) -> QWidget: ...
