"""Small widgets the frame and the screens share (a screen may import this module: it is part of the shell's
public surface, with ``protocols``, ``pages``, ``state_bridge``, ``theme`` and ``text_dialog``)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    """A one-line label that shows "…" instead of growing: its minimum width is a few characters, whatever it
    shows. (It was the shorter of the text and those characters: a label that went from empty to a figure
    raised the header's minimum, and near the window's minimum width that took 32 px from the chat list.)"""

    def __init__(self, text: str = "", min_chars: int = 6) -> None:
        super().__init__(text)
        self._min_chars = min_chars
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        margins = self.contentsMargins().left() + self.contentsMargins().right()
        return QSize(self.fontMetrics().averageCharWidth() * self._min_chars + margins,
                     super().minimumSizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt naming
        painter = QPainter(self)
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), text)
