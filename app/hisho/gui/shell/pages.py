"""The main window's pages (Chats, Models, Memory planner, Settings) and the rail that switches between them.

Models, the planner and Settings are pages of the one window, as in LM Studio or Jan, not windows of their own:
a page cannot open off screen, cannot outgrow a 1280×720 screen on its own, follows the window's theme, and
cannot be lost (a cached top-level window that was closed could fail to come back).

Rules of use: GUI thread. A page is registered with a factory (``add``) and built the first time it is shown
(``show_page``), then kept for the window's life. ``close()`` on a page (what tests and older callers do with a
window) leaves it: the host shows Chats again instead of hiding the page inside the stack. Esc on a page does
the same (the window's Esc handler calls ``back``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QButtonGroup, QFrame, QPushButton, QStackedWidget, QVBoxLayout, QWidget

log = logging.getLogger("hisho.gui")

CHATS = "chats"
RAIL_WIDTH = 76


class ShowsPages(Protocol):
    """What an opener of a page needs of the window (``open_models``, ``open_preferences``, ``open_planner``)."""

    def show_page(self, name: str) -> QWidget: ...


class PageHost(QStackedWidget):
    """The stack of pages; Chats (the chat list and the chat) is the first and is always there."""

    changed = Signal(str)   # the name of the page now shown

    def __init__(self, chats: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._factories: dict[str, Callable[[], QWidget]] = {}
        self._pages: dict[str, QWidget] = {CHATS: chats}
        self.addWidget(chats)
        self.currentChanged.connect(lambda _i: self.changed.emit(self.current_name()))

    def add(self, name: str, factory: Callable[[], QWidget]) -> None:
        self._factories[name] = factory

    def page(self, name: str) -> QWidget | None:
        """The page if it was built already (no building here)."""
        return self._pages.get(name)

    def show_page(self, name: str) -> QWidget:
        page = self._pages.get(name)
        if page is None:
            page = self._factories[name]()
            page.setWindowFlag(Qt.WindowType.Window, False)  # a page, whatever the widget was made for
            self._pages[name] = page
            self.addWidget(page)
            page.installEventFilter(self)
        self.setCurrentWidget(page)
        page.show()
        return page

    def current_name(self) -> str:
        page = self.currentWidget()
        return next((n for n, p in self._pages.items() if p is page), CHATS)

    def back(self) -> bool:
        """Show Chats again; False when it is on screen already."""
        if self.current_name() == CHATS:
            return False
        self.setCurrentWidget(self._pages[CHATS])
        return True

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if event.type() == QEvent.Type.Close and watched in self._pages.values():
            event.ignore()               # a page is never hidden inside the stack: closing it means leaving it
            if watched is self.currentWidget():
                self.back()
            return True
        return False


class NavRail(QFrame):
    """A narrow column of page buttons on the window's left edge; the button of the page shown is checked."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("NavRail")
        self.setFixedWidth(RAIL_WIDTH)
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(6, 10, 6, 10)
        self._lay.setSpacing(6)
        self._group = QButtonGroup(self)
        self._group.setExclusive(True)
        self.buttons: dict[str, QPushButton] = {}
        self._bottom = False

    def add(self, name: str, text: str, tip: str, *, bottom: bool = False) -> QPushButton:
        if bottom and not self._bottom:
            self._lay.addStretch(1)
            self._bottom = True
        button = QPushButton(text)
        button.setObjectName("RailButton")
        button.setCheckable(True)
        button.setToolTip(tip)
        button.setAccessibleName(tip.split(" (")[0])
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.clicked.connect(lambda _=False, n=name: self.chosen.emit(n))
        self._group.addButton(button)
        self._lay.addWidget(button)
        self.buttons[name] = button
        return button

    def finish(self) -> None:
        if not self._bottom:
            self._lay.addStretch(1)

    def show_current(self, name: str) -> None:
        button = self.buttons.get(name)
        if button is not None:
            button.setChecked(True)
