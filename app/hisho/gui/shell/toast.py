"""A toast: one short message over the bottom of the chat area, with an optional action (Undo) and a close button.

Rules of use: ``Toast(host)`` once; ``show_message(text, action, label, ms)`` replaces whatever it showed. It
stays for ``ms`` (several seconds: an Undo must be seen to be used) and while the pointer rests on it. The last
action offered stays reachable with ``trigger_action`` (Ctrl+Z) while the toast shows. Errors go here too, so
they appear where the user is looking rather than in the status bar's corner.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QEnterEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from hisho.gui.shell.protocols import TOAST_MS

GAP = 10   # between the toast and the message box, and above the toast for what it must not cover


class Toast(QFrame):
    covering = Signal(int)   # pixels above ``above`` kept clear for the toast (0: nothing covered)

    def __init__(self, host: QWidget, above: QWidget | None = None) -> None:
        super().__init__(host)
        self.setObjectName("Toast")
        self.host = host
        self.above = above            # shown just above this child of ``host`` (the message box)
        self.label = QLabel("")
        self.label.setObjectName("ToastText")
        self.label.setWordWrap(True)
        self.action_button = QPushButton("Undo")
        self.action_button.setObjectName("ToastAction")
        self.action_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.action_button.clicked.connect(self.trigger_action)
        close = QPushButton("✕")
        close.setObjectName("Flat")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.dismiss)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 8, 6, 8)
        lay.setSpacing(10)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.action_button)
        lay.addWidget(close)
        self._action: Callable[[], None] | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.dismiss)
        host.installEventFilter(self)
        if above is not None:
            above.installEventFilter(self)   # the message box grows and shrinks (chips, lines): follow it
        self._covered = 0
        self.hide()

    def show_message(self, text: str, action: Callable[[], None] | None = None, label: str = "Undo",
                     ms: int = TOAST_MS) -> None:
        self.label.setText(text)
        self._action = action
        self.action_button.setText(label)
        self.action_button.setToolTip(f"{label} (Ctrl+Z)" if label == "Undo" else label)
        self.action_button.setVisible(action is not None)
        self._place()
        self.show()
        self.raise_()
        self._timer.start(ms)

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def has_action(self) -> bool:
        return self.isVisible() and self._action is not None

    def label_is_undo(self) -> bool:
        """An Undo is on offer (Ctrl+Z may take it; "Load anyway" and the like need a click)."""
        return self.has_action() and self.action_button.text() == "Undo"

    def trigger_action(self) -> bool:
        """Run the offered action once (the button or Ctrl+Z); False when there is none."""
        action, self._action = self._action, None
        if action is None or not self.isVisible():
            return False
        self.dismiss()
        action()
        return True

    def dismiss(self) -> None:
        self._timer.stop()
        self._action = None
        self.hide()
        self._cover(0)

    def _place(self) -> None:
        width = min(560, max(200, self.host.width() - 48))
        self.setFixedWidth(width)
        self.adjustSize()
        bottom = self.above.geometry().top() if self.above is not None else self.host.height()
        self.move((self.host.width() - width) // 2, max(0, bottom - self.height() - GAP))
        self._cover(self.height() + 2 * GAP if self.above is not None else 0)

    def _cover(self, px: int) -> None:
        if px != self._covered:
            self._covered = px
            self.covering.emit(px)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        moved = event.type() in (QEvent.Type.Resize, QEvent.Type.Move)
        if self.isVisible() and ((obj is self.host and event.type() == QEvent.Type.Resize)
                                 or (obj is self.above and moved)):
            self._place()
        return False

    def move_to(self, host: QWidget, above: QWidget | None = None) -> None:
        """Show over ``host`` from now on (the page on screen: a page's messages must be seen on that page)."""
        if host is self.host:
            return
        shown = self.isVisible()
        self._cover(0)
        self.host.removeEventFilter(self)
        if self.above is not None:
            self.above.removeEventFilter(self)
        self.setParent(host)
        self.host, self.above = host, above
        host.installEventFilter(self)
        if above is not None:
            above.installEventFilter(self)
        if shown:
            self._place()
            self.show()
            self.raise_()

    def enterEvent(self, event: QEnterEvent) -> None:  # noqa: N802 - Qt naming
        self._timer.stop()  # reading it: it stays
        super().enterEvent(event)

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt naming
        if self.isVisible():
            self._timer.start(3000)
        super().leaveEvent(event)
