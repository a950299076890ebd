"""Documents on the messages themselves: the sent bubble names the documents attached with it; an answer in a
chat with documents lists its numbered sources ("Sources: [1] report.pdf, p. 17 · [2] …"), each a button that
opens the document's text scrolled to the passage, highlighted (``doc_viewer``), with a note when the document
may not say what the answer says; a summary lists the pages it came from and, when the model is too small for
summaries, says so in a banner over it that stays.

What is shown: ``hisho.core.documents.extras`` (an answer to a long document shows the passages the model was
given, in that order). It is read on the ``store`` lane and put on the widgets on screen; a widget put on
screen later (a reply that just finished, older messages scrolled in) gets its extras from what was read
last, or asks for a new read.

Rules of use: ``DocSources(window)`` once, after the window's chat view exists (``AttachController`` makes it).
GUI thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Qt, QTimer, SignalInstance
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from hisho.core.documents.extras import Found, Group, Shown, read_extras
from hisho.gui import ops
from hisho.gui.chat.composer import themed_paperclip
from hisho.gui.chat.doc_viewer import DocumentViewer
from hisho.gui.chat.flow import FlowLayout
from hisho.gui.chat.message_widget import MessageWidget
from hisho.gui.shell.protocols import HasContext

if TYPE_CHECKING:
    from hisho.gui.chat.chat_view import ChatView

log = logging.getLogger("hisho.gui")


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
    """"Sources:" (an answer) or "Pages:" (a summary) and one numbered button per source; a click opens the
    document viewer on it."""

    def __init__(self, shown: list[Shown], groups: list[Group], *, summary: bool = False,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SourcesRow")
        self.shown = shown
        self.groups = groups
        self.summary = summary
        lay = FlowLayout(self)   # many sources wrap onto more lines instead of widening the window
        head = QLabel("Pages:" if summary else "Sources:")
        head.setObjectName("Meta")
        head.setToolTip("The parts of the document this summary came from" if summary else
                        "The passages of the document this answer was given, in that order")
        lay.addWidget(head)
        self.buttons: list[QPushButton] = []
        for s in shown:
            b = QPushButton(f"[{s.number}] {s.label}")
            b.setObjectName("Chip")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.setToolTip(f"{s.excerpt}\n\nClick to read it in the document")
            b.clicked.connect(lambda _=False, q=s: self.open(q))
            self.buttons.append(b)
            lay.addWidget(b)
        self.dialog: DocumentViewer | None = None

    def open(self, s: Shown) -> None:
        group = self.groups[s.group]
        self.dialog = DocumentViewer(group.title, group.passages, self.window())
        self.dialog.show()
        kind = "Part" if self.summary else "Source"
        self.dialog.show_passages(s.first, s.last, f"{kind} {s.number}: {s.label}")


def note_label(text: str) -> QLabel:
    """"The document may not say this": under an answer whose key terms are not in its passages."""
    label = QLabel(f"⚠ {text}")
    label.setObjectName("GroundingNote")
    label.setWordWrap(True)
    return label


def banner(text: str) -> QLabel:
    """The "too small for summaries" verdict over the summary, naming a model that would do better."""
    label = QLabel(text)
    label.setObjectName("SummaryBanner")
    label.setWordWrap(True)
    return label


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

        ops.database(self.ctx.executor, work).success(self._show).quiet("no sources").run()

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
        f = self.found
        if m.role == "user":
            widget.set_extra("attachments", attachment_row(f.names[m.id]) if m.id in f.names else None)
        elif m.role == "assistant":
            shown = f.sources.get(m.id)
            widget.set_extra("sources", SourcesRow(shown, f.groups, summary=m.id in f.summaries) if shown else None)
            note = f.notes.get(m.id)
            widget.set_extra("note", note_label(note) if note else None)   # set last: nearest the answer
            verdict = f.banners.get(m.id)
            widget.set_extra("banner", banner(verdict) if verdict else None)
            widget.say_elsewhere(f"⚠ {verdict}" if verdict else "")       # the banner says it: not twice
