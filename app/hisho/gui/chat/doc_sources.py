"""Documents on the messages themselves: the sent bubble names the documents attached with it, and an answer in a
chat with documents lists the passages it rests on ("Sources: report.docx · § Costs"), each a button that opens
the passage's text.

Which passages and which documents: ``hisho.core.documents.sources``. The chat's documents and a summary chat's
parts are read on the ``store`` lane together with the ranking (FTS5 over the parts), and the result is put on
the widgets on screen; a widget put on screen later (a reply that just finished, older messages scrolled in)
gets its extras from what was read last, or asks for a new read.

Rules of use: ``DocSources(window)`` once, after the window's chat view exists (``AttachController`` makes it).
GUI thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Qt, QTimer, SignalInstance
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from hisho.core.documents.sources import Attached, Passage, Ranker, Sent, attachments_by_message, sources_for
from hisho.gui.chat.composer import themed_paperclip
from hisho.gui.chat.message_widget import MessageWidget
from hisho.gui.shell.protocols import HasContext

if TYPE_CHECKING:
    from hisho.gui.chat.chat_view import ChatView

log = logging.getLogger("hisho.gui")



@dataclass
class Found:
    conversation_id: int = 0
    names: dict[int, list[str]] = field(default_factory=dict)        # user message -> documents it carried
    sources: dict[int, list[Passage]] = field(default_factory=dict)  # answer -> its passages
    judged: set[int] = field(default_factory=set)                    # the messages this read looked at
    has_documents: bool = False


class PassageDialog(QDialog):
    """One passage of an attached document, whole, with where it comes from."""

    def __init__(self, passage: Passage, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(passage.label)
        self.resize(620, 420)
        lay = QVBoxLayout(self)
        title = QLabel(passage.label)
        title.setObjectName("DialogTitle")
        title.setWordWrap(True)
        self.text = QTextBrowser()
        self.text.setPlainText(passage.text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(title)
        lay.addWidget(self.text, 1)
        lay.addWidget(buttons)


def attachment_row(names: list[str]) -> QWidget:
    """The documents a sent message carried, as chips at the top of its bubble."""
    row = QWidget()
    row.setObjectName("BubbleAttachments")
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(6)
    for name in names:
        chip = QFrame()
        chip.setObjectName("DocChip")
        chip.setToolTip(f"{name} was attached with this message")
        inner = QHBoxLayout(chip)
        inner.setContentsMargins(8, 2, 8, 2)
        inner.setSpacing(4)
        icon = QLabel()
        icon.setObjectName("ChipIcon")
        themed_paperclip(icon)
        inner.addWidget(icon)
        inner.addWidget(QLabel(name))
        lay.addWidget(chip)
    lay.addStretch(1)
    return row


class SourcesRow(QWidget):
    """"Sources:" and one button per passage; a click opens the passage."""

    def __init__(self, passages: list[Passage], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SourcesRow")
        self.passages = passages
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        head = QLabel("Sources:")
        head.setObjectName("Meta")
        lay.addWidget(head)
        self.buttons: list[QPushButton] = []
        for p in passages:
            b = QPushButton(p.label)
            b.setObjectName("Chip")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.setToolTip(f"{p.excerpt}\n\nClick to read the passage")
            b.clicked.connect(lambda _=False, q=p: self.open(q))
            self.buttons.append(b)
            lay.addWidget(b)
        lay.addStretch(1)
        self.dialog: PassageDialog | None = None

    def open(self, passage: Passage) -> None:
        self.dialog = PassageDialog(passage, self.window())
        self.dialog.show()


class SourcesWindow(HasContext, Protocol):
    """What the documents on the messages use of the window: the message view, and which chat is on screen."""

    @property
    def view(self) -> ChatView: ...

    @property
    def conversation_selected(self) -> SignalInstance: ...

    def window(self) -> QWidget: ...


class DocSources(QObject):
    def __init__(self, window: SourcesWindow) -> None:
        super().__init__(window.window())
        self.w = window
        self.ctx = window.ctx
        self.found = Found()
        self.reads = 0                  # reads finished (tests wait on it)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)      # many asks in one event-loop turn make one read
        self._timer.timeout.connect(self._read)
        window.view.inserted.connect(self._inserted)
        window.conversation_selected.connect(lambda _cid: self.refresh())

    def refresh(self) -> None:
        self._timer.start()

    def _inserted(self, widget: MessageWidget) -> None:
        m = widget.message
        f = self.found
        if m is None:
            return
        if f.conversation_id != m.conversation_id:  # another chat came on screen: read its documents
            self.refresh()
        elif m.id in f.judged:
            self._decorate(widget)
        elif f.has_documents:  # a message just sent or answered in a chat with documents
            self.refresh()

    def _read(self) -> None:
        view = self.w.view
        cid = view.conversation_id
        if cid is None:
            return
        messages = list(view.messages)
        docs_of = self.ctx.documents

        def work() -> Found:
            return read_extras(docs_of, cid, messages)

        self.ctx.executor.submit("store", work, done=self._show, failed=lambda exc: log.info("no sources: %s", exc))

    def _show(self, found: Found) -> None:
        self.reads += 1
        if found.conversation_id != self.w.view.conversation_id:
            return
        self.found = found
        for widget in self.w.view.widgets.values():
            self._decorate(widget)

    def _decorate(self, widget: MessageWidget) -> None:
        m = widget.message
        if m is None:
            return
        names, sources = self.found.names, self.found.sources
        if m.role == "user":
            widget.set_extra("attachments", attachment_row(names[m.id]) if m.id in names else None)
        elif m.role == "assistant":
            widget.set_extra("sources", SourcesRow(sources[m.id]) if sources.get(m.id) else None)


def read_extras(documents: Any, cid: int, messages: list[Any]) -> Found:
    """Store lane: the chat's documents, which message carried each, and each answer's sources."""
    from hisho.core.documents.ask import load_attachment

    chat_docs = documents.chat_documents().attached(cid)
    passages = [Passage(d.name, ref, text) for d in chat_docs for ref, text in d.parts]
    summary = load_attachment(documents.cache().db, cid)
    if summary is not None:
        passages += [Passage("", ref, text) for ref, text in summary.parts]
    names = attachments_by_message([Attached(d.name, d.added) for d in chat_docs],
                                   [Sent(m.id, m.role, m.created_at) for m in messages])
    sources: dict[int, list[Passage]] = {}
    if passages:
        by_id = {m.id: m for m in messages}
        with Ranker(passages) as ranker:  # one index for the whole history
            for m in messages:
                if m.role != "assistant" or not m.content.strip():
                    continue
                parent = by_id.get(m.parent_id) if m.parent_id is not None else None
                question = parent.content if parent is not None and parent.role == "user" else ""
                found = sources_for(passages, question, m.content, ranker=ranker)
                if found:
                    sources[m.id] = found
    return Found(cid, names, sources, {m.id for m in messages}, bool(passages))
