"""The composer's images: thumbnails of the pictures waiting to be sent with the next message, each with a ×.

Rules of use: ``ImageTray`` is a row the composer shows above the message box; ``add(name, path)`` shows one kept
image (``hisho.core.conversations.images``: checked, stored in the data folder), ``names()`` is what the next
message carries, ``clear()`` empties it after a send. ``note(text)`` shows one line in place of the thumbnails
(a refused image, "this model cannot see images"). ``changed`` fires when the set of images changes.
``sent_pictures(paths)``: the thumbnails on a sent message; a click shows the picture larger (``show_large``).
GUI thread only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

THUMB = 56   # pixels a side in the composer
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def thumbnail(path: Path, side: int) -> QPixmap:
    pix = QPixmap(str(path))
    if pix.isNull():
        return pix
    return pix.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)


class ImageTray(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(6)
        self.row.setAlignment(Qt.AlignmentFlag.AlignLeft)   # the pictures start where the text does
        self.line = QLabel("")
        self.line.setObjectName("Hint")
        self.line.setWordWrap(True)
        self.line.hide()
        self.row.addWidget(self.line, 1)
        self._names: list[str] = []
        self._frames: dict[str, QFrame] = {}
        self.hide()

    def names(self) -> list[str]:
        return list(self._names)

    def add(self, name: str, path: Path) -> None:
        if name in self._names:
            return
        frame = QFrame()
        frame.setObjectName("ImageChip")
        frame.setToolTip("This picture goes with your next message")
        frame.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)   # the × beside its picture
        lay = QHBoxLayout(frame)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(0)
        pic = QLabel()
        pic.setObjectName("ImageThumb")
        pic.setPixmap(thumbnail(path, THUMB))
        pic.setAccessibleName("Picture to send")
        lay.addWidget(pic)
        remove = QPushButton("×")
        remove.setObjectName("Flat")
        remove.setAccessibleName("Remove this picture")
        remove.setToolTip("Remove this picture from the message")
        remove.setCursor(Qt.CursorShape.PointingHandCursor)
        remove.clicked.connect(lambda _=False, n=name: self.remove(n))
        lay.addWidget(remove, 0, Qt.AlignmentFlag.AlignTop)
        self.row.insertWidget(len(self._names), frame)
        self._names.append(name)
        self._frames[name] = frame
        self.line.hide()
        self.setVisible(True)
        self.changed.emit()

    def remove(self, name: str) -> None:
        frame = self._frames.pop(name, None)
        if frame is None:
            return
        self._names.remove(name)
        frame.setParent(None)
        frame.deleteLater()
        self.setVisible(bool(self._names) or self.line.isVisible())
        self.changed.emit()

    def clear(self) -> None:
        for name in list(self._names):
            self.remove(name)
        self.note("")

    def note(self, text: str) -> None:
        """One line under the thumbnails ('' hides it)."""
        self.line.setText(text)
        self.line.setVisible(bool(text))
        self.setVisible(bool(self._names) or bool(text))


SENT_THUMB = 120   # pixels a side on a sent message


class _Thumb(QLabel):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.setObjectName("ImageThumb")
        pix = thumbnail(path, SENT_THUMB)
        if pix.isNull():
            self.setText("(picture missing)")
        else:
            self.setPixmap(pix)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Click to see it larger")
        self.setAccessibleName("Picture sent with this message")

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt naming
        if event.button() == Qt.MouseButton.LeftButton:
            show_large(self.path, self.window())
        super().mousePressEvent(event)


def show_large(path: Path, parent: QWidget) -> QDialog:
    """The picture in a dialog, scaled to fit most of the window (never enlarged)."""
    box = QDialog(parent)
    box.setWindowTitle("Picture")
    lay = QVBoxLayout(box)
    label = QLabel()
    label.setObjectName("ImageLarge")
    pix = QPixmap(str(path))
    limit = max(200, int(min(parent.width(), parent.height()) * 0.85))
    if not pix.isNull() and (pix.width() > limit or pix.height() > limit):
        pix = pix.scaled(limit, limit, Qt.AspectRatioMode.KeepAspectRatio,
                         Qt.TransformationMode.SmoothTransformation)
    label.setPixmap(pix)
    lay.addWidget(label)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def sent_pictures(paths: list[Path]) -> QWidget:
    """The thumbnails on a sent user message (click: larger)."""
    row = QWidget()
    row.setObjectName("SentPictures")
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(6)
    for path in paths:
        lay.addWidget(_Thumb(path))
    lay.addStretch(1)
    return row
