"""The message box: Enter sends, Shift+Enter adds a line, Esc stops (or leaves edit mode). It grows with its
text up to a limit, shows the draft's token count, and turns its Send button into Stop while a reply streams.

Rules of use: it only emits signals (``send_requested``, ``stop_requested``, ``draft_changed``,
``edit_cancelled``); the window decides what happens. A refused send (empty text) does nothing and keeps the text.
Edit mode (``begin_edit``) shows a banner ("Editing your message … Esc to cancel") and puts what was being typed
aside; ``cancel_edit`` and ``end_edit(restore=True)`` bring it back, so editing an old message never loses a draft.
While editing, ``draft_text()`` is that set-aside draft (what the window saves as the chat's draft).
Documents: the paperclip (``attach_requested``) and files dropped on the box (``files_dropped``) are attached to
the chat on screen by the window; ``set_attachments`` shows them as chips above the text, whose × emits
``detach_requested``. A file dropped anywhere else in the window is summarized instead (``hisho.gui.chat.documents``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QBuffer, QEvent, QIODevice, QMimeData, QObject, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QDragEnterEvent,
    QDropEvent,
    QIcon,
    QImage,
    QKeyEvent,
    QKeySequence,
    QPainter,
    QPainterPath,
    QPen,
    QPixmap,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from hisho.gui.chat.image_tray import ImageTray, is_image
from hisho.gui.shell import theme
from hisho.gui.shell.widgets import ElidedLabel

HINT = "Enter to send · Shift+Enter for a new line"
DROP_HINT = "Drop to attach to this chat"
EDIT_BANNER = "✎  Editing your message — it will be sent as version {n} of {n}; the original stays · Esc to cancel"

TOKENS_TIP = ("Tokens of your text alone. The meter at the top counts everything the model reads: system prompt, "
              "earlier messages and the chat template's markers around each message.")
ATTACH_TIP = ("Attach a document to this chat (PDF, DOCX or any text file; or drop it on the message box), "
              "or a picture (PNG, JPEG, WebP; or paste it) for a model that sees images.")
MAX_LINES_SHOWN = 10
COUNT_DELAY_MS = 400


def paperclip_icon(colour: QColor, size: int = 32) -> QIcon:
    """A paperclip drawn as a path (no emoji font needed), tilted like the usual attach symbol."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    u = size / 16
    path = QPainterPath(QPointF(10.5 * u, 5 * u))
    path.lineTo(10.5 * u, 11.5 * u)
    path.arcTo(QRectF(5.5 * u, 9 * u, 5 * u, 5 * u), 0, -180)
    path.lineTo(5.5 * u, 3.75 * u)
    path.arcTo(QRectF(5.5 * u, 2 * u, 3.5 * u, 3.5 * u), 180, -180)
    path.lineTo(9 * u, 11 * u)
    path.arcTo(QRectF(7.25 * u, 10.25 * u, 1.75 * u, 1.75 * u), 0, -180)
    path.lineTo(7.25 * u, 5 * u)
    painter = QPainter(pix)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.translate(size / 2, size / 2)
    painter.rotate(40)
    painter.translate(-size / 2, -size / 2)
    painter.setPen(QPen(colour, 1.3 * u, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap, Qt.PenJoinStyle.RoundJoin))
    painter.drawPath(path)
    painter.end()
    return QIcon(pix)


def themed_paperclip(target: QLabel | QPushButton, size: int = 14) -> None:
    """The paperclip on ``target`` in the theme's text colour, now and after every theme change."""
    def draw(t: theme.Theme) -> None:
        icon = paperclip_icon(QColor(t.text))
        if isinstance(target, QLabel):
            target.setPixmap(icon.pixmap(size, size))
        else:
            target.setIcon(icon)

    theme.follow(target, draw)


class Composer(QFrame):
    send_requested = Signal(str)
    stop_requested = Signal()
    draft_changed = Signal(str)        # debounced; the window counts tokens and saves the draft
    edit_cancelled = Signal()
    attach_requested = Signal()
    files_dropped = Signal(list)        # list[Path]: files dropped on the box
    detach_requested = Signal(int)     # a document chip's ×
    stop_reading_requested = Signal()  # the Stop of a chip for a document still being read
    images_given = Signal(list)        # list[bytes | Path]: pictures pasted or dropped (checked and kept elsewhere)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ComposerFrame")
        self.edit = _Edit(self)
        self.edit.setObjectName("Composer")
        self.edit.setPlaceholderText("Message Hisho…")
        self.edit.setTabChangesFocus(True)
        self.edit.installEventFilter(self)
        self.edit.textChanged.connect(self._changed)
        self.edit.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.mode = QFrame()
        self.mode.setObjectName("EditBanner")
        banner = QHBoxLayout(self.mode)
        banner.setContentsMargins(10, 4, 4, 4)
        self.mode_label = QLabel("")
        self.mode_label.setObjectName("Marker")
        self.cancel_button = QPushButton("Cancel edit")
        self.cancel_button.setObjectName("Flat")
        self.cancel_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.cancel_button.setToolTip("Leave the message as it was (Esc)")
        self.cancel_button.clicked.connect(self.cancel_edit)
        banner.addWidget(self.mode_label, 1)
        banner.addWidget(self.cancel_button)
        self.mode.hide()
        self.tokens = ElidedLabel("", 4)
        self.tokens.setObjectName("TokenCount")
        self.tokens.setToolTip(TOKENS_TIP)
        self.hint = ElidedLabel(HINT, 4)
        self.hint.setObjectName("Hint")
        self.attach_button = QPushButton()
        themed_paperclip(self.attach_button)
        self.attach_button.setObjectName("Flat")
        self.attach_button.setAccessibleName("Attach a document or a picture")
        self.attach_button.setToolTip(ATTACH_TIP)
        self.attach_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.attach_button.clicked.connect(self.attach_requested)
        self.chips = QWidget()
        self.chips_row = QHBoxLayout(self.chips)
        self.chips_row.setContentsMargins(0, 0, 0, 0)
        self.chips_row.setSpacing(6)
        self.chips.hide()
        self._chip_keys: list[tuple[int, str]] = []   # (id, tooltip) of the chips shown
        self.edit.viewport().installEventFilter(self)
        self.button = QPushButton("Send")
        self.button.setObjectName("SendButton")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.clicked.connect(self._button_clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 10, 10, 10)
        lay.setSpacing(6)
        lay.addWidget(self.mode)
        lay.addWidget(self.chips)
        self.images = ImageTray()
        self.images.changed.connect(self._update_button)
        lay.addWidget(self.images)
        lay.addWidget(self.edit)
        row = self.button_row = QHBoxLayout()   # the window adds the Tools control after the paperclip
        row.addWidget(self.attach_button)
        row.addWidget(self.tokens, 3)
        row.addStretch(0)
        row.addWidget(self.hint, 2)
        row.addSpacing(10)
        row.addWidget(self.button)
        lay.addLayout(row)
        self.generating = False
        self.outer_undo: Callable[[], bool] | None = None   # Ctrl+Z: the window's Undo (a delete) goes first
        self.editing_id: int | None = None
        self._set_aside = ""               # what was typed before an edit began
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(COUNT_DELAY_MS)
        self._debounce.timeout.connect(lambda: self.draft_changed.emit(self.text()))
        self._fit_height()
        self._update_button()

    # ----- state -----------------------------------------------------------------------------------------

    def text(self) -> str:
        return self.edit.toPlainText()

    def focus(self) -> None:
        self.edit.setFocus()

    def clear(self) -> None:
        self.edit.clear()

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
        self.tokens.setToolTip(f"{text}\n\n{TOKENS_TIP}" if text else TOKENS_TIP)
        self.tokens.setObjectName("Marker" if warn else "TokenCount")
        self.tokens.style().unpolish(self.tokens)
        self.tokens.style().polish(self.tokens)

    def draft_text(self) -> str:
        """The chat's unsent draft: the box's text, or while editing, what was typed before the edit began."""
        return self._set_aside if self.editing_id is not None else self.text()

    def begin_edit(self, message_id: int, text: str, versions: int = 2) -> None:
        """Load a sent message for editing; what was being typed is set aside (not lost). ``versions``: how many
        versions the message will have once the edit is sent (the banner says so)."""
        if self.editing_id is None:
            self._set_aside = self.text()
        self.editing_id = message_id
        self.mode_label.setText(EDIT_BANNER.format(n=versions))
        self.mode.show()
        self._update_button()
        self.set_text(text)
        self.edit.setFocus()
        self.edit.selectAll()

    def end_edit(self, restore: bool = False) -> None:
        """Leave edit mode; ``restore`` puts the set-aside draft back in the box (else the caller sets it)."""
        if self.editing_id is None:
            return
        self.editing_id = None
        self.mode.hide()
        aside, self._set_aside = self._set_aside, ""
        if restore:
            self.set_text(aside)
        self._update_button()

    def cancel_edit(self) -> None:
        """Esc or "Cancel edit": the message stays as it was and the earlier draft comes back."""
        if self.editing_id is not None:
            self.end_edit(restore=True)
            self.edit_cancelled.emit()

    # ----- events ----------------------------------------------------------------------------------------

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is self.edit.viewport() and self._drop_event(event):
            return True
        if obj is self.edit and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            key = event
            if key.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                    key.modifiers() & Qt.KeyboardModifier.ShiftModifier):
                self.submit()
                return True
            if key.matches(QKeySequence.StandardKey.Undo) and self.outer_undo is not None and self.outer_undo():
                return True  # a delete was just undone; typing undo works as usual otherwise
            if key.key() == Qt.Key.Key_Escape:
                if self.generating:
                    self.stop_requested.emit()
                else:
                    self.cancel_edit()
                return True
        return super().eventFilter(obj, event)

    def _drop_event(self, event: QEvent) -> bool:
        """Files dragged onto the box are attached to the chat (not pasted as their path)."""
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            drag: QDragEnterEvent = event  # type: ignore[assignment]
            if drag.mimeData().hasUrls():
                drag.acceptProposedAction()
                self._show_drop(True)
                return True
        elif kind == QEvent.Type.DragLeave:
            self._show_drop(False)
        elif kind == QEvent.Type.Drop:
            drop: QDropEvent = event  # type: ignore[assignment]
            self._show_drop(False)
            files = [Path(u.toLocalFile()) for u in drop.mimeData().urls() if u.isLocalFile()]
            if files:
                drop.acceptProposedAction()
                self.take_files(files)
                return True
        return False

    def _show_drop(self, on: bool) -> None:
        self.hint.setText(DROP_HINT if on else HINT)
        self.setProperty("dropping", on)
        self.style().unpolish(self)
        self.style().polish(self)

    def set_attachments(self, docs: list[tuple[int, str, str]]) -> None:
        """Chips for the chat's documents: (id, name, tooltip); an id of 0 is one still being read (no ×)."""
        labels = self.chips.findChildren(ElidedLabel)
        if [(d, tip) for d, _n, tip in docs] == self._chip_keys and len(labels) == len(docs):
            for label, (_d, name, _tip) in zip(labels, docs, strict=True):
                label.setText(name)   # progress of a file being read: the same chips (a Stop being clicked stays)
            return
        self._chip_keys = [(d, tip) for d, _n, tip in docs]
        while self.chips_row.count():
            item = self.chips_row.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.setParent(None)   # at once: attachment_names() must not see the old chips
                widget.deleteLater()
        for doc_id, name, tip in docs:
            chip = QFrame()
            chip.setObjectName("DocChip")
            chip.setToolTip(tip)
            row = QHBoxLayout(chip)
            row.setContentsMargins(8, 2, 2, 2)
            row.setSpacing(2)
            icon = QLabel()
            icon.setObjectName("ChipIcon")
            themed_paperclip(icon)
            row.addWidget(icon)
            row.addWidget(ElidedLabel(name, 6))
            if doc_id:
                remove = QPushButton("×")
                remove.setObjectName("Flat")
                remove.setAccessibleName(f"Remove {name} from this chat")
                remove.setToolTip(f"Remove {name} from this chat (the conversation keeps its messages)")
                remove.clicked.connect(lambda _=False, d=doc_id: self.detach_requested.emit(d))
                row.addWidget(remove)
            else:
                stop = QPushButton("Stop")
                stop.setObjectName("Flat")
                stop.setAccessibleName(f"Stop reading {name}")
                stop.setToolTip("Stop reading it: it is not attached")
                stop.clicked.connect(self.stop_reading_requested)
                row.addWidget(stop)
            self.chips_row.addWidget(chip)
        self.chips_row.addStretch(1)
        self.chips.setVisible(bool(docs))

    def take_files(self, files: list[Path]) -> None:
        """Dropped files: pictures go with the next message, the others are attached as documents."""
        pictures = [f for f in files if is_image(f)]
        if pictures:
            self.images_given.emit(pictures)
        documents = [f for f in files if not is_image(f)]
        if documents:
            self.files_dropped.emit(documents)

    def attachment_names(self) -> list[str]:
        """The chips' texts (tests)."""
        return [lab.text() for lab in self.chips.findChildren(ElidedLabel)]

    def submit(self) -> None:
        if not self.text().strip() and not self.images.names():
            return  # an empty message is never sent (one typed while a reply streams waits for it)
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
        self.button.setText("Stop" if self.generating else "Send edit" if self.editing_id is not None else "Send")
        self.button.setObjectName("StopButton" if self.generating else "SendButton")
        self.button.setEnabled(self.generating or bool(self.text().strip()) or bool(self.images.names()))
        self.button.style().unpolish(self.button)
        self.button.style().polish(self.button)

    def _fit_height(self) -> None:
        doc = self.edit.document()
        line = self.edit.fontMetrics().lineSpacing()
        lines = min(MAX_LINES_SHOWN, max(2, doc.blockCount() if doc.blockCount() < 50 else MAX_LINES_SHOWN))
        self.edit.setFixedHeight(lines * line + 12)


class _Edit(QPlainTextEdit):
    """The message box: a pasted picture (Ctrl+V of an image, or of an image file) goes to the composer's images,
    never into the text as its path."""

    def __init__(self, composer: Composer) -> None:
        super().__init__()
        self._composer = composer

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt naming
        return source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt naming
        files = [Path(u.toLocalFile()) for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []
        if files and all(is_image(f) for f in files):
            self._composer.images_given.emit(files)
            return
        if source.hasImage():
            image = QImage(source.imageData())
            buf = QBuffer()
            buf.open(QIODevice.OpenModeFlag.WriteOnly)
            if not image.isNull() and image.save(buf, "PNG"):  # type: ignore[call-overload]
                self._composer.images_given.emit([bytes(buf.data().data())])
                return
        super().insertFromMimeData(source)
