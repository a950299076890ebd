"""One message on screen: a user bubble or an assistant reply rendered from Markdown, with its actions.

Rules of use: ``MessageWidget.set_text`` re-renders from the whole text but reuses the segment widgets it
already has, so a streaming reply costs one label update per flush (usually only the last segment changes).
Actions are reported with the ``action(name, message_id)`` signal; the widget itself does no work.
"""

from __future__ import annotations

import time
from datetime import datetime

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFontMetrics, QGuiApplication, QResizeEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from hisho.core.conversations import images as chat_images
from hisho.core.conversations.schema import STOPPED_AT_CLOSE
from hisho.core.conversations.store import FAILED, INTERRUPTED, STOPPED, Message
from hisho.gui.chat import markdown
from hisho.gui.chat.image_tray import sent_pictures
from hisho.gui.chat.thinking import ThinkingBlock
from hisho.gui.shell import theme

_USER_SHOWN = 20_000  # a 1 MB paste is stored whole; drawing all of it in a label would stall the window
_SELECTABLE = Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse


class _Label(QLabel):
    """A QLabel that remembers its height for a width until its text, font or style changes.

    Qt asks every label of every message for ``heightForWidth`` on each relayout, and a rich-text QLabel lays
    its whole document out again to answer: with 20 messages on screen, a streaming flush cost ~25 ms of the GUI
    thread (measured), all of it re-measuring text that had not changed."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self._hfw: dict[int, int] = {}

    def setText(self, text: str) -> None:  # noqa: N802 - Qt naming
        self._hfw.clear()
        super().setText(text)

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt naming
        h = self._hfw.get(width)
        if h is None:
            if len(self._hfw) > 8:
                self._hfw.clear()
            h = self._hfw[width] = super().heightForWidth(width)
        return h

    def fitted_height(self, width: int) -> int:
        """The text's own height at ``width``. QLabel never answers ``heightForWidth`` below the label's minimum
        height, so a label given a fixed height could grow with a narrower window but never shrink back."""
        self.setMinimumHeight(0)
        self._hfw.clear()
        return super().heightForWidth(width)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt naming
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange, QEvent.Type.PaletteChange):
            self._hfw.clear()
        super().changeEvent(event)


def _label(text: str = "", name: str = "", rich: bool = True) -> QLabel:
    lab = _Label(text)
    if name:
        lab.setObjectName(name)
    lab.setTextFormat(Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
    lab.setWordWrap(True)
    lab.setTextInteractionFlags(_SELECTABLE)
    lab.setOpenExternalLinks(True)
    return lab


def _drop(w: QWidget) -> None:
    """Take a segment off the screen now (deleteLater alone leaves it drawn until the event loop gets to it,
    which a loop driven by processEvents may never do), then free it."""
    w.hide()
    w.setParent(None)
    w.deleteLater()


def _flat(text: str, tip: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName("Flat")
    b.setToolTip(tip)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    b.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    return b


class CodeBlock(QFrame):
    """A highlighted code block with its language and a Copy button."""

    def __init__(self, seg: markdown.Segment) -> None:
        super().__init__()
        self.setObjectName("CodeBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        head = QWidget()
        head.setObjectName("CodeHeader")
        hl = QHBoxLayout(head)
        hl.setContentsMargins(12, 4, 6, 4)
        self.lang = QLabel(seg.language or "code")
        self.lang.setObjectName("Meta")
        self.copy_button = _flat("Copy", "Copy this code")
        self.copy_button.clicked.connect(self.copy)
        hl.addWidget(self.lang)
        hl.addStretch(1)
        hl.addWidget(self.copy_button)
        self.body = _label(seg.html)
        self.body.setContentsMargins(12, 8, 12, 10)
        lay.addWidget(head)
        lay.addWidget(self.body)
        self.code = seg.code

    def update_segment(self, seg: markdown.Segment) -> None:
        self.code = seg.code
        self.lang.setText(seg.language or "code")
        self.body.setText(seg.html)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")


class MessageWidget(QWidget):
    """A message row. ``message`` may be None while a reply streams in (``streaming`` True)."""

    action = Signal(str, int)

    def __init__(self, message: Message | None, *, role: str = "assistant", siblings: list[int] | None = None,
                 streaming: bool = False, queued: bool = False) -> None:
        super().__init__()
        self.message = message
        self.role = message.role if message else role
        self.streaming = streaming
        self.queued = queued                         # a message waiting to be sent (no id yet)
        self.text = message.content if message else ""
        self.said_elsewhere = ""                     # a passage of the text the message shows another way
        self._segments: list[QWidget] = []
        self._kinds: list[str] = []
        self._head_cut = -1                          # streaming: where the finished blocks end
        self._head_segs: list[markdown.Segment] = []
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 6, 0, 6)
        self.card = QFrame()
        self.card.setObjectName("UserBubble" if self.role == "user" else "AssistantBody")
        self.body = QVBoxLayout(self.card)
        self.body.setContentsMargins(14, 10, 14, 10) if self.role == "user" else self.body.setContentsMargins(
            2, 0, 2, 0)
        self.body.setSpacing(12)
        column = QVBoxLayout()
        column.setSpacing(4)
        self.column = column
        self.extras: dict[str, QWidget] = {}         # "attachments" (in the bubble), "sources" (under the reply)
        self.thinking: ThinkingBlock | None = None   # a reasoning model's thinking, folded above the answer
        if self.role != "user":
            who = _label("Assistant", "RoleLabel", rich=False)
            column.addWidget(who)
        column.addWidget(self.card)
        if message is not None and message.reasoning:
            self.show_thinking(message.reasoning, message.reasoning_s, thinking=False,
                               unfinished=not message.content)
        self.footer = QHBoxLayout()
        self.footer.setSpacing(2)
        column.addLayout(self.footer)
        if self.role == "user":
            outer.addStretch(1)
            self.footer.addStretch(1)
            column.setAlignment(self.card, Qt.AlignmentFlag.AlignRight)
        outer.addLayout(column, 0 if self.role == "user" else 1)
        self.set_text(self.text)
        pictures = chat_images.names(message.images) if message is not None and self.role == "user" else []
        if pictures:
            self.set_extra("pictures", sent_pictures([chat_images.path(n) for n in pictures]))
        self._build_footer(siblings or [])

    # ----- content ---------------------------------------------------------------------------------------

    def say_elsewhere(self, passage: str) -> None:
        """Leave ``passage`` out of the rendered reply because something on the message already says it (a
        summary's verdict, shown as a banner over it); the text itself, and so Copy, keeps it."""
        if passage != self.said_elsewhere:
            self.said_elsewhere = passage
            self.set_text(self.text)

    def set_text(self, text: str) -> float:
        """Render ``text``; returns the seconds spent (the view uses it to pace streaming)."""
        start = time.perf_counter()
        self.text = text
        if self.role == "user":
            shown = text if len(text) <= _USER_SHOWN else (
                text[:_USER_SHOWN] + f"\n… ({len(text) - _USER_SHOWN:,} more characters; Copy takes all)")
            segs = [markdown.Segment("plain", shown)]
        elif self.streaming:
            segs = self._streaming_segments(text)
        else:
            body = text.replace(self.said_elsewhere, "").rstrip() if self.said_elsewhere else text
            segs = markdown.render(body, theme.current()) if body else []
        for i, seg in enumerate(segs):
            if i < len(self._segments) and self._kinds[i] == seg.kind:
                self._update_segment(self._segments[i], seg)
            else:
                for w in self._segments[i:]:
                    _drop(w)
                del self._segments[i:], self._kinds[i:]
                w = self._make_segment(seg)
                self._segments.append(w)
                self._kinds.append(seg.kind)
                self.body.addWidget(w)
        for w in self._segments[len(segs):]:
            _drop(w)
        del self._segments[len(segs):], self._kinds[len(segs):]
        if self.role == "user":
            self._fit_bubble()
        return time.perf_counter() - start

    def _streaming_segments(self, text: str) -> list[markdown.Segment]:
        """While a reply streams in, the finished blocks (up to the last blank line outside a code fence) are
        rendered apart from the block being written: each flush then re-lays out only the small last label, not
        the whole reply (a full relayout of a growing rich-text label cost ~3.5 ms per flush on a 2-core box,
        taken from the decode threads). The finished message is rendered whole by ``end_stream``."""
        cut = markdown.stable_prefix(text)
        if cut != self._head_cut:
            self._head_cut = cut
            self._head_segs = markdown.render(text[:cut], theme.current()) if cut else []
        tail = text[cut:]
        return self._head_segs + (markdown.render(tail, theme.current()) if tail.strip() else [])

    def _make_segment(self, seg: markdown.Segment) -> QWidget:
        if seg.kind == "code":
            return CodeBlock(seg)
        return _label(seg.html, rich=seg.kind == "html")

    def _update_segment(self, w: QWidget, seg: markdown.Segment) -> None:
        if isinstance(w, CodeBlock):
            w.update_segment(seg)
        elif isinstance(w, QLabel) and w.text() != seg.html:
            w.setText(seg.html)

    def set_extra(self, kind: str, widget: QWidget | None) -> None:
        """Show ``widget`` as the message's ``kind`` extra, replacing the one before (None removes it):
        "attachments" at the top of the bubble, "banner" above the reply, any other kind ("sources", "note")
        between the reply and its actions, the last one set nearest the reply."""
        old = self.extras.pop(kind, None)
        if old is not None:
            _drop(old)
        if widget is None:
            return
        self.extras[kind] = widget
        if kind in ("attachments", "pictures"):   # at the top of the bubble
            self.body.insertWidget(0, widget)
        elif kind == "banner":
            self.column.insertWidget(self.column.indexOf(self.card), widget)
        else:
            self.column.insertWidget(self.column.indexOf(self.card) + 1, widget)

    def show_thinking(self, text: str, seconds: float | None, *, thinking: bool, unfinished: bool = False) -> None:
        """The reply's reasoning in a fold above the answer (made on first use)."""
        if self.thinking is None:
            if not text:
                return
            self.thinking = ThinkingBlock()
            self.column.insertWidget(self.column.indexOf(self.card), self.thinking)
        self.thinking.show_thinking(text, seconds, thinking=thinking, unfinished=unfinished)

    def append(self, piece: str) -> float:
        return self.set_text(self.text + piece)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for w in self._segments if isinstance(w, CodeBlock)]

    # ----- footer: meta, markers, actions ------------------------------------------------------------------

    def _build_footer(self, siblings: list[int]) -> None:
        m = self.message
        self.switcher: tuple[QPushButton, QLabel, QPushButton] | None = None  # ‹ k / n › between versions
        self.buttons: dict[str, QPushButton] = {}
        if self.queued:
            self.meta = _label("waiting…", "Marker", rich=False)
            self.meta.setWordWrap(False)
            cancel = _flat("Cancel", "Do not send this message; its text goes back to the message box")
            cancel.clicked.connect(lambda: self.action.emit("cancel", 0))
            self.buttons["cancel"] = cancel
            self.footer.addWidget(self.meta)
            self.footer.addWidget(cancel)
            return
        if self.streaming or m is None:
            self.meta = _label("generating…", "Meta", rich=False)
            self.meta.setWordWrap(False)
            self.footer.addWidget(self.meta)
            if self.role != "user":
                self.footer.addStretch(1)
            return
        if m.status in (STOPPED, INTERRUPTED, FAILED):
            what = {STOPPED: "Stopped", INTERRUPTED: "Interrupted", FAILED: "Engine crashed"}[m.status]
            if m.status == STOPPED and m.error == STOPPED_AT_CLOSE:
                what = "Stopped when Hisho closed"
            self.marker = _label(f"{what} · partial reply", "ErrorMarker" if m.status == FAILED else "Marker", False)
            self.marker.setWordWrap(False)  # a wrapping label in the action row broke it over two lines
            self.marker.setToolTip(m.error or "the reply did not finish")
            self.footer.addWidget(self.marker)
        if len(siblings) > 1 and m.id in siblings:
            i = siblings.index(m.id)
            prev_b, next_b = _flat("‹", "Previous version"), _flat("›", "Next version")
            prev_b.setEnabled(i > 0)
            next_b.setEnabled(i < len(siblings) - 1)
            prev_b.clicked.connect(lambda: self.action.emit("branch", siblings[i - 1]))
            next_b.clicked.connect(lambda: self.action.emit("branch", siblings[i + 1]))
            pos = _label(f"{i + 1} / {len(siblings)}", "Meta", rich=False)
            pos.setToolTip(f"Version {i + 1} of {len(siblings)} of this {'message' if self.role == 'user' else 'reply'}"
                           "; the arrows switch the conversation to another version")
            self.switcher = (prev_b, pos, next_b)
            for w in (prev_b, pos, next_b):
                self.footer.addWidget(w)
        names = ["copy", "edit", "delete"] if self.role == "user" else ["copy", "regenerate", "delete"]
        if m.partial and self.role == "assistant":
            names[1] = "retry"  # the same action as Regenerate, named for what the user wants here
        tips = {"copy": "Copy the message", "edit": "Edit and send again (the original stays)",
                "regenerate": "Write a new reply (the old one stays as a version)", "delete": "Delete this "
                "message and what follows it (you can undo)", "retry": "Write this reply again (the partial one "
                "stays as a version)"}
        for name in names:
            b = _flat(name.capitalize(), tips[name])
            b.clicked.connect(lambda _=False, n=name: self._clicked(n))
            self.buttons[name] = b
            self.footer.addWidget(b)
        self.meta = _label(self._meta_text(m), "Meta", rich=False)
        self.meta.setWordWrap(False)
        self.footer.addWidget(self.meta)
        if self.role != "user":
            self.footer.addStretch(1)

    def set_waiting(self, text: str) -> None:
        """A queued message: say what it waits for; a streaming reply: say what happens ("stopping…")."""
        if self.queued or self.streaming:
            self.meta.setText(text)

    def _clicked(self, name: str) -> None:
        assert self.message is not None
        if name == "copy":
            QGuiApplication.clipboard().setText(self.text)
        self.action.emit(name, self.message.id)

    @staticmethod
    def _meta_text(m: Message) -> str:
        parts = [datetime.fromtimestamp(m.created_at).strftime("%H:%M")] if m.created_at else []
        if m.role == "assistant" and m.tokens:
            parts.append(f"{m.tokens} tokens")
            if m.tokens_per_s:
                parts.append(f"{m.tokens_per_s:.1f} tok/s")
        return " · ".join(parts)

    # ----- layout ------------------------------------------------------------------------------------------

    def _fit_bubble(self) -> None:
        """User bubbles hug short text and wrap long text at 78% of the row."""
        if not self._segments:
            return
        lab = self._segments[0]
        fm = QFontMetrics(lab.font())
        lines = self.text.splitlines() or [""]
        natural = max(fm.horizontalAdvance(line) for line in lines[:200]) + 8
        limit = max(200, int(self.width() * 0.78) - 28)
        width = min(natural, limit)
        lab.setFixedWidth(width)
        # The height too: the bubble is right-aligned in its column, and an aligned item is laid out from its
        # size hint, not its height for width, so a narrower window cut the text after the lines it had before.
        height = lab.fitted_height(width) if isinstance(lab, _Label) else lab.heightForWidth(width)
        lab.setFixedHeight(height if height >= 0 else lab.sizeHint().height())   # -1: no text to wrap
        lab.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt naming
        super().resizeEvent(event)
        if self.role == "user":
            self._fit_bubble()

    def highlight(self, on: bool) -> None:
        t = theme.current()
        self.card.setStyleSheet(f"#{self.card.objectName()} {{ border: 2px solid {t.accent}; }}" if on else "")
