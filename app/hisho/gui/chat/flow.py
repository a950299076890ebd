"""A layout that places its widgets in a row and wraps them onto the next line when the row is full.

Why: a row of source buttons under an answer ("[1] report.pdf, p. 17 · [2] …") in a ``QHBoxLayout`` asks for
the width of all its buttons, and at 700 px a long document's answer with six sources widened the window.
Here the width is the widest button and the height follows from the width (``heightForWidth``), so a narrow
window shows the sources on two or three lines. Qt ships no such layout in its widgets module (it is one of its
examples); this is a small one for rows of buttons and labels.

Rules of use: GUI thread; add widgets with ``addWidget``; items are never stretched, and each is centred on
its line.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QWidget


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, spacing: int = 4) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._gap = spacing
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 - Qt naming
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 - Qt naming
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802 - Qt naming
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802 - Qt naming
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt naming
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt naming
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 - Qt naming
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        return self.minimumSize()

    def minimumSize(self) -> QSize:  # noqa: N802 - Qt naming
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def _place(self, rect: QRect, *, move: bool) -> int:
        """Lay the items out in ``rect`` (or only measure), each centred on its line's height; returns the
        height they take."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        lines: list[list[tuple[QLayoutItem, int]]] = [[]]
        x = area.x()
        for item in self._items:
            width = item.sizeHint().width()
            if x + width > area.right() + 1 and lines[-1]:
                lines.append([])
                x = area.x()
            lines[-1].append((item, x))
            x += width + self._gap
        y = area.y()
        for line in lines:
            tall = max((item.sizeHint().height() for item, _ in line), default=0)
            for item, left in line:
                hint = item.sizeHint()
                if move:
                    item.setGeometry(QRect(QPoint(left, y + (tall - hint.height()) // 2), hint))
            y += tall + self._gap
        return max(0, y - self._gap - rect.y() + m.bottom())
