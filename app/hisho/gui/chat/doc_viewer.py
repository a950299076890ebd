"""The document viewer a source opens: the document's extracted text, scrolled to the passage, which is
highlighted.

The text is what the model could be given (the document's passages in order, each under a line with its page
or section: ``hisho.core.documents.sources.lay_out``), not the file, so what is highlighted is exactly what was
read. The highlight is an extra selection of the text browser (``QTextEdit.ExtraSelection``): it colours the
passage without changing the text or the user's own selection, and tests read it back.

Rules of use: GUI thread. ``DocumentViewer(title, passages, parent)`` once per click; ``show_passages(first,
last)`` highlights passages ``first..last`` (a summary's part spans several) and scrolls to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QTextBrowser, QTextEdit, QVBoxLayout, QWidget

from hisho.core.documents.sources import Passage, lay_out
from hisho.gui.shell import theme

# The highlight: a marker yellow that reads on both themes (the text keeps its own colour on light, and turns
# dark on the dark theme's yellow, as on paper).
_MARK_LIGHT, _MARK_DARK = "#fde68a", "#a16207"


class DocumentViewer(QDialog):
    def __init__(self, title: str, passages: Sequence[Passage], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("DocumentViewer")
        self.setWindowTitle(title)
        self.resize(680, 520)
        self.passages = list(passages)
        text, self.spans = lay_out(self.passages)
        self.marked = (0, 0)     # the highlighted characters of the text
        lay = QVBoxLayout(self)
        self.title = QLabel(title)
        self.title.setObjectName("DialogTitle")
        self.title.setWordWrap(True)
        self.where = QLabel("")
        self.where.setObjectName("Meta")
        self.text = QTextBrowser()
        self.text.setObjectName("DocumentText")
        self.text.setPlainText(text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(self.title)
        lay.addWidget(self.where)
        lay.addWidget(self.text, 1)
        lay.addWidget(buttons)

    def show_passages(self, first: int, last: int | None = None, caption: str = "") -> None:
        """Highlight passages ``first..last`` (inclusive) and scroll so that the first one starts at the top;
        ``caption`` says what is highlighted ("Source 1: p. 17")."""
        last = first if last is None else last
        start, end = self.spans[first][0], self.spans[last][1]
        self.marked = (start, end)
        cursor = QTextCursor(self.text.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        mark = QTextEdit.ExtraSelection()
        fmt = QTextCharFormat()
        dark = theme.current().dark
        fmt.setBackground(QColor(_MARK_DARK if dark else _MARK_LIGHT))
        if dark:
            fmt.setForeground(QColor("#ffffff"))
        mark.format = fmt
        mark.cursor = cursor
        self.text.setExtraSelections([mark])
        refs = [p.ref or p.document for p in self.passages[first:last + 1]]
        what = caption or refs[0] + (f" to {refs[-1]}" if len(refs) > 1 else "")
        self.where.setText(f"{what}, highlighted · the document's text as read, {len(self.passages)} passages")
        # To the end first, then back to the passage's reference line: scrolling up to it leaves it at the top
        # of the view, not at the bottom.
        self.text.moveCursor(QTextCursor.MoveOperation.End)
        at = QTextCursor(self.text.document())
        at.setPosition(start)
        at.movePosition(QTextCursor.MoveOperation.PreviousBlock)
        self.text.setTextCursor(at)
        self.text.ensureCursorVisible()

    def mark_top(self) -> int:
        """Where the highlight starts, in pixels from the top of the visible text (in view: 0 to its height)."""
        at = QTextCursor(self.text.document())
        at.setPosition(self.marked[0])
        return self.text.cursorRect(at).top()

    def highlighted(self) -> str:
        """The highlighted text, as plain text (what a test or a screen reader reads)."""
        found = self.text.extraSelections()
        if not found:
            return ""
        return found[0].cursor.selectedText().replace("\u2029", "\n")
