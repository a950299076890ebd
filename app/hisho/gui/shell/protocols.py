"""What the window's parts may use of the main window, as narrow ``Protocol``s shared by several modules.

A part that plugs into the window (a settings page, the remote switch, the pages' builders) names here, or
beside itself when it alone uses it, exactly what it reads or writes of the window; mypy checks at each call
that ``MainWindow`` has it. A part then cannot come to depend on the rest of the window unnoticed, and a test
can hand it anything that has those members.

Where a part needs the window as a Qt parent (of a dialog, a page, a helper QObject) it asks for ``window()``:
``QWidget.window()`` of the main window is the main window itself (it is top-level).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QWidget

if TYPE_CHECKING:
    from hisho.core.conversations.store import Conversation
    from hisho.core.services import Services as AppContext  # the window's name for it (gui/shell/context.py)
    from hisho.gui.shell.state_bridge import StateBridge


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


class Presenter(Protocol):
    """What a screen uses of the chat presenter (``ChatController``, which a screen never names): the chat on
    screen, toasts, the report of a failed operation, and switching the model."""

    current: Conversation | None

    def toast(self, text: str, undo: Callable[[], None] | None = None, label: str = "Undo",
              ms: int = TOAST_MS) -> None: ...
    def report(self, exc: BaseException) -> None: ...
    def switch_model(self, name: str, override: bool = False) -> None: ...


class HasController(HasContext, Protocol):
    """The services and the chat presenter, as far as a screen uses it (``Presenter``)."""

    @property
    def controller(self) -> Presenter: ...


class ApiWindow(HasState, Protocol):
    """Settings → API (the server itself is the root's: ``ctx.served``; its requests show in the status bar's
    queue, from the app state)."""


class DataWindow(Protocol):
    """Settings → Your data: "remove my data" closes the window and asks for the folders to go after it."""

    remove_data_on_exit: bool

    def close(self) -> bool: ...

    def window(self) -> QWidget: ...


class SettingsWindow(ApiWindow, DataWindow, Protocol):
    """The Settings page and every section on it (``window()``: the page's parent)."""
