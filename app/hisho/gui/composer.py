"""The message box: Enter sends, Shift+Enter adds a line, Esc stops (or leaves edit mode). It grows with its
text up to a limit, shows the draft's token count, and turns its Send button into Stop while a reply streams.

Rules of use: it only emits signals (``send_requested``, ``stop_requested``, ``draft_changed``); the window
decides what happens. A refused send (empty text) does nothing and keeps the text.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

MAX_LINES_SHOWN = 10
COUNT_DELAY_MS = 400


class Composer(QFrame):
    send_requested = Signal(str)
    stop_requested = Signal()
    draft_changed = Signal(str)        # debounced; the window counts tokens and saves the draft
    edit_cancelled = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ComposerFrame")
        self.edit = QPlainTextEdit()
        self.edit.setObjectName("Composer")
        self.edit.setPlaceholderText("Message Hisho…")
        self.edit.setTabChangesFocus(True)
        self.edit.installEventFilter(self)
        self.edit.textChanged.connect(self._changed)
        self.edit.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.mode = QLabel("")
        self.mode.setObjectName("Marker")
        self.mode.hide()
        self.tokens = QLabel("")
        self.tokens.setObjectName("TokenCount")
        hint = QLabel("Enter to send · Shift+Enter for a new line")
        hint.setObjectName("Hint")
        self.button = QPushButton("Send")
        self.button.setObjectName("SendButton")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.clicked.connect(self._button_clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 10, 10, 10)
        lay.setSpacing(6)
        lay.addWidget(self.mode)
        lay.addWidget(self.edit)
        row = QHBoxLayout()
        row.addWidget(self.tokens)
        row.addStretch(1)
        row.addWidget(hint)
        row.addSpacing(10)
        row.addWidget(self.button)
        lay.addLayout(row)
        self.generating = False
        self.editing_id: int | None = None
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(COUNT_DELAY_MS)
        self._debounce.timeout.connect(lambda: self.draft_changed.emit(self.text()))
        self._fit_height()
        self._update_button()

    # ----- state -----------------------------------------------------------------------------------------

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)
        cursor = self.edit.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.edit.setTextCursor(cursor)

    def set_generating(self, on: bool) -> None:
        self.generating = on
        self._update_button()

    def set_token_info(self, text: str, warn: bool = False) -> None:
        self.tokens.setText(text)
        self.tokens.setObjectName("Marker" if warn else "TokenCount")
        self.tokens.style().unpolish(self.tokens)
        self.tokens.style().polish(self.tokens)

    def begin_edit(self, message_id: int, text: str) -> None:
        self.editing_id = message_id
        self.mode.setText("Editing a message: sending keeps the original as another version · Esc cancels")
        self.mode.show()
        self.set_text(text)
        self.edit.setFocus()

    def end_edit(self) -> None:
        self.editing_id = None
        self.mode.hide()

    # ----- events ----------------------------------------------------------------------------------------

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is self.edit and event.type() == QEvent.Type.KeyPress:
            key = QKeyEvent(event) if not isinstance(event, QKeyEvent) else event
            if key.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                    key.modifiers() & Qt.KeyboardModifier.ShiftModifier):
                self.submit()
                return True
            if key.key() == Qt.Key.Key_Escape:
                if self.generating:
                    self.stop_requested.emit()
                elif self.editing_id is not None:
                    self.end_edit()
                    self.edit.clear()
                    self.edit_cancelled.emit()
                return True
        return super().eventFilter(obj, event)

    def submit(self) -> None:
        if self.generating or not self.text().strip():
            return  # an empty message is never sent
        self.send_requested.emit(self.text())

    def _button_clicked(self) -> None:
        if self.generating:
            self.stop_requested.emit()
        else:
            self.submit()

    def _changed(self) -> None:
        self._fit_height()
        self._update_button()
        self._debounce.start()

    def _update_button(self) -> None:
        self.button.setText("Stop" if self.generating else "Send")
        self.button.setObjectName("StopButton" if self.generating else "SendButton")
        self.button.setEnabled(self.generating or bool(self.text().strip()))
        self.button.style().unpolish(self.button)
        self.button.style().polish(self.button)

    def _fit_height(self) -> None:
        doc = self.edit.document()
        line = self.edit.fontMetrics().lineSpacing()
        lines = min(MAX_LINES_SHOWN, max(2, doc.blockCount() if doc.blockCount() < 50 else MAX_LINES_SHOWN))
        self.edit.setFixedHeight(lines * line + 12)
