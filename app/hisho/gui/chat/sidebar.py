"""The conversation list: New chat, search, pinned first, then grouped by date; rename, pin, export, delete.

Rules of use: the sidebar shows what it is given (``set_conversations`` / ``set_search_results``, and each chat's
saved-KV badge with ``set_kv``) and reports what the user asked for through signals; searching itself runs on
the store worker in the window, KV figures on the KV session's worker (``hisho.gui.chat.kv_status``).
"""

from __future__ import annotations

import html
import re
import time
from datetime import datetime, timedelta

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QFont, QFontMetrics, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from hisho.core.conversations.store import Conversation, SearchHit
from hisho.gui.chat.title_edit import MAX_TITLE
from hisho.gui.shell.text_dialog import ask_text

ID_ROLE = Qt.ItemDataRole.UserRole
TITLE_ROLE = Qt.ItemDataRole.UserRole + 1
KV_ROLE = Qt.ItemDataRole.UserRole + 2      # the saved-KV badge text ("12 MB · 9 s"), "" when none
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 3  # a search result's matching text, as rich text ("" for chat rows)
BADGE_SCALE = 0.82
SNIPPET_LINES = 2                            # a search result shows this many lines of its match, wrapped
SNIPPET_SCALE = 0.9
SEARCH_DELAY_MS = 200


def date_group(ts: float, now: float | None = None) -> str:
    today = datetime.fromtimestamp(now or time.time()).date()
    day = datetime.fromtimestamp(ts).date()
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    if day > today - timedelta(days=7):
        return "Previous 7 days"
    if day > today - timedelta(days=30):
        return "Previous 30 days"
    return "Older"


def snippet_html(snippet: str, query: str) -> str:
    """A search snippet as rich text: the words that matched (SQLite's snippet() brackets them) in bold. A
    bracket that does not enclose a query word is the message's own text and stays as it is."""
    terms = [t.strip('"*').casefold() for t in query.split() if t.strip('"*')]

    def mark(m: re.Match[str]) -> str:
        word = m.group(1)
        if any(word.casefold().startswith(t) or t.startswith(word.casefold()) for t in terms):
            return f"<b>{html.escape(word)}</b>"
        return html.escape(m.group(0))

    out, last = [], 0
    for m in re.finditer(r"\[([^\[\]\n]{1,80})\]", snippet):
        out.append(html.escape(snippet[last:m.start()]))
        out.append(mark(m))
        last = m.end()
    out.append(html.escape(snippet[last:]))
    return "".join(out).replace("\n", " ")


class BadgeDelegate(QStyledItemDelegate):
    """Draws a row as usual, its first line elided to leave room for a small grey right-aligned badge; a search
    result gets its matching text under the title, wrapped on up to SNIPPET_LINES lines, the match in bold."""

    @staticmethod
    def _small(font: QFont, scale: float = BADGE_SCALE) -> QFont:
        small = QFont(font)
        small.setPointSizeF(small.pointSizeF() * scale)
        return small

    def sizeHint(self, option: QStyleOptionViewItem,  # noqa: N802 - Qt naming
                 index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            font = index.data(Qt.ItemDataRole.FontRole) or option.font  # type: ignore[attr-defined]
            lines = SNIPPET_LINES * QFontMetrics(self._small(font, SNIPPET_SCALE)).lineSpacing()
            size.setHeight(size.height() + lines + 4)
        return size

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        text = index.data(KV_ROLE)
        snippet = index.data(SNIPPET_ROLE)
        if not text and not snippet:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        widget = opt.widget  # type: ignore[attr-defined]
        style = widget.style() if widget is not None else QApplication.style()
        small = self._small(opt.font)  # type: ignore[attr-defined]
        width = QFontMetrics(small).horizontalAdvance(text) + 12 if text else 0
        area = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        fm = opt.fontMetrics  # type: ignore[attr-defined]
        lines = str(opt.text).split("\n")  # type: ignore[attr-defined]
        lines[0] = fm.elidedText(lines[0], Qt.TextElideMode.ElideRight, max(20, area.width() - width))
        opt.text = "\n".join(lines)  # type: ignore[attr-defined]
        if snippet:
            opt.displayAlignment = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop  # type: ignore
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        if snippet:
            self._paint_snippet(painter, opt, area, str(snippet), self._small(opt.font, SNIPPET_SCALE))  # type: ignore
        if not text:
            return
        top = area.top() if snippet else area.center().y() - len(lines) * fm.lineSpacing() // 2
        painter.save()
        painter.setFont(small)
        painter.setPen(opt.palette.color(QPalette.ColorRole.PlaceholderText))  # type: ignore[attr-defined]
        painter.drawText(QRect(area.right() - width, top, width, fm.lineSpacing()),
                         int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), text)
        painter.restore()

    @staticmethod
    def _paint_snippet(painter: QPainter, opt: QStyleOptionViewItem, area: QRect, rich: str, font: QFont) -> None:
        doc = QTextDocument()
        doc.setDefaultFont(font)
        doc.setDocumentMargin(0)
        colour = opt.palette.color(QPalette.ColorRole.PlaceholderText).name()  # type: ignore[attr-defined]
        doc.setHtml(f'<span style="color:{colour}">{rich}</span>')
        doc.setTextWidth(area.width())
        height = SNIPPET_LINES * QFontMetrics(font).lineSpacing()   # not a pixel of a third line
        painter.save()
        widget = opt.widget  # type: ignore[attr-defined]
        style = widget.style() if widget is not None else QApplication.style()
        inset = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget) + 1  # as the title's
        painter.translate(area.left() + inset, area.top() + opt.fontMetrics.lineSpacing() + 2)  # type: ignore
        doc.setTextWidth(area.width() - 2 * inset)
        doc.drawContents(painter, QRectF(0, 0, area.width(), height))
        painter.restore()


class Sidebar(QFrame):
    selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    pin_requested = Signal(int, bool)
    export_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setMinimumWidth(220)
        self.setMaximumWidth(360)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 14, 6, 10)
        lay.setSpacing(10)
        top = QHBoxLayout()
        brand = QLabel("Hisho")
        brand.setObjectName("Brand")
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("Primary")
        self.new_button.setToolTip("New chat (Ctrl+N)")
        self.new_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.new_button.clicked.connect(self.new_requested)
        top.addWidget(brand)
        top.addStretch(1)
        top.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setObjectName("SidebarSearch")
        self.search.setPlaceholderText("Search chats  (Ctrl+K)")
        self.search.setClearButtonEnabled(True)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(SEARCH_DELAY_MS)
        self._debounce.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._debounce.start())
        self.list = QListWidget()
        self.list.setObjectName("ConversationList")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setItemDelegate(BadgeDelegate(self.list))
        # Under the list: what the engine in use means for these chats (a remote engine without slot saving:
        # resuming long chats is the server's job, Hisho's KV cache is not used). Hidden when there is nothing.
        self.engine_note = QLabel()
        self.engine_note.setObjectName("Hint")
        self.engine_note.setWordWrap(True)
        self.engine_note.hide()
        lay.addLayout(top)
        lay.addWidget(self.search)
        lay.addWidget(self.list, 1)
        lay.addWidget(self.engine_note)
        self.current_id: int | None = None
        self._quiet = False
        self._kv: dict[int, tuple[str, str]] | None = None  # per chat: (badge, tooltip); None: KV off
        self._kv_none = ("", "")

    # ----- content ---------------------------------------------------------------------------------------

    def set_conversations(self, conversations: list[Conversation], current: int | None) -> None:
        groups: list[tuple[str, list[Conversation]]] = []
        for c in conversations:
            name = "Pinned" if c.pinned else date_group(c.updated_at)
            if not groups or groups[-1][0] != name:
                groups.append((name, []))
            groups[-1][1].append(c)
        self._fill([(name, [(c.id, c.title or "Untitled", "") for c in items]) for name, items in groups], current)

    def set_search_results(self, hits: list[SearchHit], current: int | None) -> None:
        rows = [(h.conversation_id, h.title or "Untitled", snippet_html(h.snippet, self.search.text()))
                for h in hits]
        self._fill([(f"{len(hits)} result{'s' if len(hits) != 1 else ''}", rows)], current)

    def _fill(self, groups: list[tuple[str, list[tuple[int, str, str]]]], current: int | None) -> None:
        self._quiet = True
        self.list.clear()
        select: QListWidgetItem | None = None
        for name, rows in groups:
            head = QListWidgetItem(name.upper())
            head.setFlags(Qt.ItemFlag.NoItemFlags)
            font = QFont(self.list.font())
            font.setPointSizeF(font.pointSizeF() * 0.78)
            font.setBold(True)
            head.setFont(font)
            self.list.addItem(head)
            for cid, title, snippet in rows:
                item = QListWidgetItem(title)
                item.setData(ID_ROLE, cid)
                item.setData(TITLE_ROLE, title)
                item.setData(SNIPPET_ROLE, snippet)
                self._show_kv(item)
                self.list.addItem(item)
                if cid == current:
                    select = item
        if select is not None:
            self.list.setCurrentItem(select)
        self.current_id = current
        self._quiet = False

    def query(self) -> str:
        """What the search box holds (the list shows matches while it is not blank)."""
        return self.search.text()

    def set_engine_note(self, text: str) -> None:
        self.engine_note.setText(text)
        self.engine_note.setVisible(bool(text))

    def set_kv(self, badges: dict[int, tuple[str, str]], none: tuple[str, str]) -> None:
        """Each chat's saved-KV (badge, tooltip); chats not in ``badges`` get ``none`` (nothing saved)."""
        self._kv, self._kv_none = dict(badges), none
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) is not None:
                self._show_kv(item)

    def kv_badge(self, cid: int) -> tuple[str, str] | None:
        """(badge, tooltip) the row of ``cid`` shows, None if the chat is not listed."""
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) == cid:
                return str(item.data(KV_ROLE) or ""), item.toolTip()
        return None

    def _show_kv(self, item: QListWidgetItem) -> None:
        title = str(item.data(TITLE_ROLE))
        if self._kv is None:
            item.setToolTip(title)
            return
        text, tip = self._kv.get(int(item.data(ID_ROLE)), self._kv_none)
        item.setData(KV_ROLE, text)
        item.setToolTip(f"{title}\n\n{tip}")

    def ids(self) -> list[int]:
        return [int(self.list.item(i).data(ID_ROLE)) for i in range(self.list.count())
                if self.list.item(i).data(ID_ROLE) is not None]

    def select(self, cid: int) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == cid:
                self.list.setCurrentRow(i)
                return

    def _current_changed(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if self._quiet or item is None or item.data(ID_ROLE) is None:
            return
        cid = int(item.data(ID_ROLE))
        if cid != self.current_id:
            self.current_id = cid
            self.selected.emit(cid)

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(ID_ROLE) is None:
            return
        cid = int(item.data(ID_ROLE))
        pinned = self.list.row(item) > 0 and self._group_of(item) == "PINNED"
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.ask_rename(cid, str(item.data(TITLE_ROLE))))
        menu.addAction("Unpin" if pinned else "Pin", lambda: self.pin_requested.emit(cid, not pinned))
        menu.addAction("Export…", lambda: self.export_requested.emit(cid))
        menu.addSeparator()
        menu.addAction("Delete", lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def _group_of(self, item: QListWidgetItem) -> str:
        row = self.list.row(item)
        while row >= 0 and self.list.item(row).data(ID_ROLE) is not None:
            row -= 1
        return self.list.item(row).text() if row >= 0 else ""

    def ask_rename(self, cid: int, current: str) -> None:
        title = ask_text(self, "Rename chat", "Title:", current, MAX_TITLE)
        if title:
            self.rename_requested.emit(cid, title)
