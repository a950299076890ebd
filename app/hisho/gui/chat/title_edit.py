"""Rename a chat where its title is shown: double-click the header title (or F2) and it becomes a text field.

Rules of use: ``InlineTitle(label)`` once, for a ``QLabel`` that sits in a box layout. ``start()`` opens the
field (F2 calls it); Enter or leaving the field commits, Esc cancels. ``renamed(title)`` is emitted only for a
non-empty title that differs from the one shown; a blank title is refused (the old one stays). The widget does
no work itself: the window's controller stores the new title.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QBoxLayout, QLabel, QLineEdit

MAX_TITLE = 120


class InlineTitle(QObject):
    renamed = Signal(str)

    def __init__(self, label: QLabel) -> None:
        super().__init__(label)
        self.label = label
        self.field = QLineEdit()
        self.field.setObjectName("TitleEdit")
        self.field.setMaxLength(MAX_TITLE)
        self.field.setMinimumWidth(320)
        self.field.setPlaceholderText("Chat title — Enter to save, Esc to cancel")
        self.field.hide()
        self.field.installEventFilter(self)
        self.field.editingFinished.connect(self.commit)  # Enter, or focus moving elsewhere
        parent = label.parentWidget()
        layout = parent.layout() if parent is not None else None
        if isinstance(layout, QBoxLayout):
            layout.insertWidget(layout.indexOf(label) + 1, self.field)
        label.installEventFilter(self)
        label.setToolTip("Double-click (or F2) to rename this chat")
        self.enabled = True

    @property
    def editing(self) -> bool:
        return self.field.isVisible()

    def start(self) -> None:
        if not self.enabled or self.editing:
            return
        self.field.setText(self.label.text())
        self.label.hide()
        self.field.show()
        self.field.setFocus()
        self.field.selectAll()

    def commit(self) -> None:
        if not self.editing:
            return
        title = " ".join(self.field.text().split())
        self._close()
        if title and title != self.label.text():
            self.label.setText(title)  # at once; the store follows on its lane
            self.renamed.emit(title)

    def cancel(self) -> None:
        self._close()

    def _close(self) -> None:
        self.field.blockSignals(True)  # hiding moves the focus: no second editingFinished
        self.field.hide()
        self.field.blockSignals(False)
        self.label.show()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is self.label and event.type() == QEvent.Type.MouseButtonDblClick:
            self.start()
            return True
        if obj is self.field and isinstance(event, QKeyEvent) and event.key() == Qt.Key.Key_Escape:
            if event.type() == QEvent.Type.ShortcutOverride:
                event.accept()  # Esc belongs to the field here, not to the window's Stop shortcut
                return True
            if event.type() == QEvent.Type.KeyPress:
                self.cancel()
                return True
        return super().eventFilter(obj, event)
