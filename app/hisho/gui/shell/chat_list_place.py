"""Where the chat list sits: beside the chat when the window is wide, over it (a drawer) when it is narrow.

A window too narrow for the list and the chat side by side (700 px, or 1280×720 at 150 %) collapses the list
to the rail: the list is hidden, and showing it (☰, Ctrl+B, Ctrl+K) lays it over the chat's left edge instead
of beside it, so showing it never widens the window. Picking a chat or Esc puts the drawer away. When the window
is wide again the list goes back beside the chat, shown or hidden as the user last had it there.

Rules of use: GUI thread; the window calls ``fit`` from its resize event. The window's minimum width is its own
(``MIN_WIDTH``), not the sum of the list's and the chat's minimums: that sum (792 px) is what kept the window
from going to 700 px.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QSplitter, QWidget

from hisho.gui.chat.sidebar import Sidebar

MIN_WIDTH = 600
DRAWER_WIDTH = 280
LIST_WIDTH = 260


class ChatListPlace(QObject):
    def __init__(self, splitter: QSplitter, sidebar: Sidebar, chat: QWidget, overlay_on: QWidget) -> None:
        super().__init__(splitter)
        self.splitter, self.sidebar, self.chat, self.overlay_on = splitter, sidebar, chat, overlay_on
        self.narrow = False
        self.wanted = True              # the list is shown when the window is wide (the user's last choice)
        self.width = LIST_WIDTH
        sidebar.selected.connect(lambda _cid: self.put_away())
        overlay_on.installEventFilter(self)
        splitter.splitterMoved.connect(self._moved)

    def _moved(self, _pos: int, _index: int) -> None:
        width = self.splitter.sizes()[0]
        if width > 0 and not self.narrow:
            self.width = width   # the user dragged the list wider or narrower: it comes back at that width

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if watched is self.overlay_on and event.type() == QEvent.Type.Resize:
            self.fit(self.overlay_on.width())
            self.place_drawer()
        return False

    def needed(self) -> int:
        """Width of the chat page below which the list and the chat do not both fit side by side."""
        return self.sidebar.minimumWidth() + self.chat.minimumSizeHint().width() + self.splitter.handleWidth()

    def fit(self, page_width: int) -> None:
        narrow = page_width < self.needed()
        if narrow != self.narrow:
            self._go_narrow() if narrow else self._go_wide()

    def shown(self) -> bool:
        if self.narrow:
            return self.sidebar.isVisible()
        return self.sidebar.isVisible() and self.splitter.sizes()[0] > 0

    def toggle(self) -> None:
        if self.narrow:
            self.put_away() if self.sidebar.isVisible() else self._show_drawer()
            return
        sizes = self.splitter.sizes()
        if self.shown():
            self.width = sizes[0]
            self.sidebar.hide()
            self.wanted = False
        else:
            self.sidebar.show()
            self.splitter.setSizes([self.width, max(0, sum(sizes) - self.width)])
            self.wanted = True

    def put_away(self) -> bool:
        """Hide the drawer (narrow window only); False when there was none on screen."""
        if not (self.narrow and self.sidebar.isVisible()):
            return False
        self.sidebar.hide()
        return True

    def place_drawer(self) -> None:
        if self.narrow:
            self.sidebar.setGeometry(0, 0, min(DRAWER_WIDTH, self.overlay_on.width()), self.overlay_on.height())

    def _show_drawer(self) -> None:
        self.place_drawer()
        self.sidebar.show()
        self.sidebar.raise_()

    def _go_narrow(self) -> None:
        # Not the list's width now: the shrinking window has squeezed it to its minimum already.
        self.narrow = True
        self.sidebar.hide()
        self.sidebar.setParent(self.overlay_on)     # out of the splitter: it no longer counts in its minimum
        self.sidebar.setProperty("drawer", True)
        self._restyle()
        self.place_drawer()

    def _go_wide(self) -> None:
        self.narrow = False
        self.sidebar.hide()
        self.sidebar.setProperty("drawer", False)
        self._restyle()
        self.splitter.insertWidget(0, self.sidebar)
        self.splitter.setCollapsible(0, True)
        self.splitter.setCollapsible(1, False)
        if self.wanted:
            self.sidebar.show()
            total = sum(self.splitter.sizes())
            self.splitter.setSizes([self.width, max(0, total - self.width)])

    def _restyle(self) -> None:
        style = self.sidebar.style()
        style.unpolish(self.sidebar)
        style.polish(self.sidebar)
