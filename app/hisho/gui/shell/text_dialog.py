"""A one-line question ("Rename chat", "Save as preset"): a label, a text field, OK and Cancel, fixed-size.

Why not ``QInputDialog``: it builds and re-sizes its own layout when shown, so a fixed size set before ``exec``
does not hold (session 4 tried ``setFixedSize`` and the layout's ``SetFixedSize``: its minimum and maximum
still differed once shown). Resizable, it gets the window manager's resize handle, which openbox draws as a
stray bar along the bottom edge (issue 11 point 8). Nothing here grows, so it is fixed like Chat settings.

Rules of use: GUI thread. ``ask_text(...)`` returns the text stripped of surrounding blanks, or None when
cancelled; OK is disabled while the field is blank, so an empty answer never comes back.
"""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QVBoxLayout, QWidget

FIELD_WIDTH = 380   # wide enough that the window manager shows the whole title ("Renam…Hisho" before)


class TextDialog(QDialog):
    def __init__(self, parent: QWidget | None, title: str, label: str, text: str = "", max_length: int = 0) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.field = QLineEdit(text)
        self.field.setMinimumWidth(FIELD_WIDTH)
        if max_length:
            self.field.setMaxLength(max_length)
        self.field.selectAll()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.field.textChanged.connect(self._allow)
        lay = QVBoxLayout(self)
        caption = QLabel(label)
        caption.setBuddy(self.field)
        lay.addWidget(caption)
        lay.addWidget(self.field)
        lay.addWidget(self.buttons)
        self._allow(text)
        self.setFixedSize(self.sizeHint())

    def _allow(self, text: str) -> None:
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(bool(text.strip()))

    def value(self) -> str:
        return self.field.text().strip()


def ask_text(parent: QWidget | None, title: str, label: str, text: str = "", max_length: int = 0) -> str | None:
    dialog = TextDialog(parent, title, label, text, max_length)
    return dialog.value() if dialog.exec() and dialog.value() else None
