"""The main window: sidebar | header + chat view (or the empty state) + composer, menus, shortcuts, status bar.

Layout and wiring only; every user action is an operation in ``hisho.gui.shell.controller``. Other features plug in
here with small additions: the File menu (documents: import, drop zone), the View menu (the memory planner
panel), and the signals ``conversation_selected`` / ``draft_changed`` / ``turn_finished`` (KV prefetch and
type-ahead).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeyEvent, QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from hisho.gui.chat.attach import AttachController
from hisho.gui.chat.chat_view import ChatView
from hisho.gui.chat.composer import Composer
from hisho.gui.chat.documents import DocumentsController
from hisho.gui.chat.sidebar import Sidebar
from hisho.gui.shell.context import AppContext
from hisho.gui.shell.controller import ChatController
from hisho.gui.shell.status_bar import ContextMeter, ElidedLabel, StatusBar
from hisho.gui.shell.toast import Toast

log = logging.getLogger("hisho.gui")

SUGGESTIONS = ("Explain how a transformer model works, simply", "Write a Python function that reverses a list",
               "Give me three ideas for a weekend trip", "Summarize the pros and cons of remote work")


class MainWindow(QMainWindow):
    conversation_selected = Signal(int)     # the chat on screen changed (id)
    draft_changed = Signal(int, str)        # the unsent text of a chat changed (debounced)
    turn_finished = Signal(object)          # hisho.core.conversations.chat.TurnResult, after the reply is saved

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.setWindowTitle("Hisho")
        self.resize(1240, 820)
        self._fit_to_screen()
        self.sidebar = Sidebar()
        self.view = ChatView()
        self.composer = Composer()
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self._build_center()
        self.controller = ChatController(self)
        self.documents = DocumentsController(self)  # drop zone, File → Summarize…, summary progress
        self._connect_documents()
        self._build_menus()
        self._build_shortcuts()
        self.attach = AttachController(self)        # paperclip and drop on the message box: attach to this chat
        from hisho.gui.chat.model_picker import attach_picker

        attach_picker(self)  # header: switch model in one click
        if ctx.problem:
            self.show_banner(ctx.problem)

    # ----- layout ----------------------------------------------------------------------------------------

    def _build_center(self) -> None:
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        self.banner = QLabel("")
        self.banner.setObjectName("Banner")
        self.banner.setWordWrap(True)
        self.banner.hide()
        rl.addWidget(self.banner)
        rl.addWidget(self._build_header())
        self.find_bar = self._build_find_bar()
        rl.addWidget(self.find_bar)
        self.pages = QStackedWidget()
        self.empty = self._build_empty_state()
        self.pages.addWidget(self.empty)
        self.pages.addWidget(self.view)
        rl.addWidget(self.pages, 1)
        holder = QWidget()
        hl = QHBoxLayout(holder)
        hl.setContentsMargins(24, 6, 24, 14)
        hl.addStretch(1)
        self.composer.setMaximumWidth(860)
        hl.addWidget(self.composer, 100)
        hl.addStretch(1)
        rl.addWidget(holder)
        self.right = right
        self.toast = Toast(right, above=holder)
        self.splitter = QSplitter()
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, 980])
        self.splitter.setHandleWidth(1)
        self.splitter.setCollapsible(0, True)   # drag it away, or Ctrl+B / the header's ☰
        self.splitter.setCollapsible(1, False)
        self.setCentralWidget(self.splitter)

    def _build_header(self) -> QWidget:
        header = QFrame()
        header.setObjectName("Header")
        lay = QHBoxLayout(header)
        lay.setContentsMargins(8, 8, 14, 8)
        self.sidebar_button = QPushButton("☰")
        self.sidebar_button.setObjectName("Flat")
        self.sidebar_button.setToolTip("Show or hide the chat list (Ctrl+B)")
        self.sidebar_button.clicked.connect(self.toggle_sidebar)
        self.title = ElidedLabel("New chat", 10)
        self.title.setObjectName("HeaderTitle")
        self.model_label = ElidedLabel("", 6)
        self.model_label.setObjectName("Meta")
        self.context_meter = ContextMeter()
        self.meter = self.context_meter.bar
        self.meter_label = self.context_meter.label
        self.settings_button = QPushButton("Chat settings")
        self.settings_button.setToolTip("Model, system prompt and sampling for this chat (Ctrl+,)")
        lay.addWidget(self.sidebar_button)
        lay.addWidget(self.title, 3)
        lay.addSpacing(8)
        lay.addWidget(self.model_label, 1)
        lay.addStretch(0)
        lay.addWidget(self.context_meter, 2)
        lay.addSpacing(8)
        lay.addWidget(self.settings_button)
        return header

    def _build_find_bar(self) -> QWidget:
        bar = QFrame()
        bar.setObjectName("FindBar")
        lay = QHBoxLayout(bar)
        lay.setContentsMargins(20, 6, 14, 6)
        self.find_edit = QLineEdit()
        self.find_edit.setPlaceholderText("Find in this chat — Enter: next, Shift+Enter: previous, Esc: close")
        self.find_edit.installEventFilter(self)
        self.find_status = QLabel("")
        self.find_status.setObjectName("Meta")
        close = QPushButton("Close")
        close.setObjectName("Flat")
        close.clicked.connect(self.hide_find)
        prev_b, next_b = QPushButton("↑"), QPushButton("↓")
        for b, tip in ((prev_b, "Previous match (Shift+Enter)"), (next_b, "Next match (Enter)")):
            b.setObjectName("Flat")
            b.setToolTip(tip)
        prev_b.clicked.connect(lambda: self.controller.listing.find_previous())
        next_b.clicked.connect(lambda: self.controller.listing.find_next())
        lay.addWidget(self.find_edit, 1)
        lay.addWidget(self.find_status)
        lay.addWidget(prev_b)
        lay.addWidget(next_b)
        lay.addWidget(close)
        bar.hide()
        return bar

    def _build_empty_state(self) -> QWidget:
        page = QWidget()
        page.setObjectName("ChatColumnHost")
        grid = QGridLayout(page)
        box = QVBoxLayout()
        box.setSpacing(10)
        title = QLabel("How can I help?")
        title.setObjectName("EmptyTitle")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_subtitle = QLabel("Chats run on this computer. Nothing leaves it.")
        self.empty_subtitle.setObjectName("EmptySubtitle")
        self.empty_subtitle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_subtitle.setWordWrap(True)  # it names the model: a long name must not widen the window
        box.addWidget(title)
        box.addWidget(self.empty_subtitle)
        box.addSpacing(18)
        chips = QGridLayout()
        chips.setSpacing(10)
        self.suggestions: list[QPushButton] = []
        for i, text in enumerate(SUGGESTIONS):
            b = QPushButton(text)
            b.setObjectName("Chip")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.clicked.connect(lambda _=False, t=text: self._use_suggestion(t))
            chips.addWidget(b, i, 0)  # one column: the window stays usable at small widths
            self.suggestions.append(b)
        box.addLayout(chips)
        grid.addLayout(box, 0, 0, Qt.AlignmentFlag.AlignCenter)
        return page

    def _use_suggestion(self, text: str) -> None:
        self.composer.set_text(text)
        self.composer.focus()

    def show_empty(self, empty: bool) -> None:
        self.pages.setCurrentWidget(self.empty if empty else self.view)

    def show_banner(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.setVisible(bool(text))

    # ----- menus and keys --------------------------------------------------------------------------------

    def _connect_documents(self) -> None:
        docs, c = self.documents, self.controller
        docs.notice.connect(lambda text, ms: c.toast(text, ms=ms))
        docs.failed.connect(c.report)
        docs.ended.connect(c.sending.pump)

        def show(cid: int) -> None:
            c.refresh(select=cid)
            c.select(cid)

        docs.opened.connect(show)

    def _build_menus(self) -> None:
        c = self.controller
        bar = self.menuBar()
        self.file_menu: QMenu = bar.addMenu("&File")
        self._action(self.file_menu, "New chat", c.listing.new_chat, QKeySequence.StandardKey.New)
        self.file_menu.addAction(self.documents.action)
        self.file_menu.addSeparator()
        self._action(self.file_menu, "Import chat…", c.listing.import_chat)
        self._action(self.file_menu, "Export chat…", lambda: c.listing.export_chat(None))
        self.file_menu.addSeparator()
        from hisho.gui.settings.preferences import open_preferences

        # App settings (KV cache budget and type, what is stored); Ctrl+, is the chat's own settings.
        self._action(self.file_menu, "Settings…", lambda: open_preferences(self), QKeySequence("Ctrl+Alt+S"))
        self.file_menu.addSeparator()
        self._action(self.file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)
        edit = bar.addMenu("&Edit")
        self._action(edit, "Undo delete", c.undo, QKeySequence.StandardKey.Undo)
        edit.addSeparator()
        self._action(edit, "Find in chat", self.show_find, QKeySequence.StandardKey.Find)
        self._action(edit, "Search chats", self.focus_search, QKeySequence("Ctrl+K"))
        self.view_menu: QMenu = bar.addMenu("&View")
        self._action(self.view_menu, "Show or hide the chat list", self.toggle_sidebar, QKeySequence("Ctrl+B"))
        from hisho.gui.models.planner_panel import open_planner

        self._action(self.view_menu, "Memory planner", lambda: open_planner(self))
        from hisho.gui.models.models_page import open_models

        self._action(self.view_menu, "Models", lambda: open_models(self), QKeySequence("Ctrl+M"))
        self.theme_menu = self.view_menu.addMenu("Theme")
        group = QActionGroup(self)
        chosen = str(self.ctx.settings["theme"])
        for name in ("system", "light", "dark"):
            # triggered(bool) passes "checked" to a slot that takes it: the name must come from a closure
            act = self._action(self.theme_menu, name.capitalize(), _theme_slot(c, name))
            act.setCheckable(True)
            act.setChecked(name == chosen)
            group.addAction(act)
        chat = bar.addMenu("&Chat")
        self.stop_action = self._action(chat, "Stop", c.sending.stop_here)
        # Enabled only where a reply is being written, like the message box's Stop (no shortcut: the menu's
        # opening is the only moment its state is seen).
        chat.aboutToShow.connect(lambda: self.stop_action.setEnabled(c.sending.generating_here()))
        self._action(chat, "Regenerate last reply", c.editing.regenerate_last, QKeySequence("Ctrl+R"))
        self._action(chat, "Rename chat", c.listing.start_rename, QKeySequence(Qt.Key.Key_F2))
        self._action(chat, "Chat settings…", c.open_settings, QKeySequence("Ctrl+,"))
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "Copy diagnostics", c.copy_diagnostics)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], object],
                key: str | QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        act = menu.addAction(text)
        act.triggered.connect(slot)
        if key is not None:
            act.setShortcut(key)
        return act

    def _build_shortcuts(self) -> None:
        esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        esc.activated.connect(self.escape)
        self.find_edit.returnPressed.connect(self.controller.listing.find_next)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is self.find_edit and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent) and \
                event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.controller.listing.find_previous()
            return True
        return super().eventFilter(obj, event)

    def escape(self) -> None:
        if self.controller.sending.generating_here():
            self.controller.sending.stop_here()
        elif self.find_bar.isVisible():
            self.hide_find()
        elif self.composer.editing_id is not None:
            self.composer.cancel_edit()  # the draft typed before the edit comes back

    def show_find(self) -> None:
        self.find_bar.show()
        self.find_edit.setFocus()
        self.find_edit.selectAll()

    def hide_find(self) -> None:
        self.find_bar.hide()
        self.composer.focus()

    def toggle_sidebar(self) -> None:
        """Hide the chat list (hidden, not just squeezed: the window may then be narrower), or bring it back."""
        sizes = self.splitter.sizes()
        if self.sidebar_shown():
            self._sidebar_width = sizes[0]
            self.sidebar.hide()
        else:
            self.sidebar.show()
            width = getattr(self, "_sidebar_width", 260)
            self.splitter.setSizes([width, max(0, sum(sizes) - width)])

    def sidebar_shown(self) -> bool:
        return self.sidebar.isVisible() and self.splitter.sizes()[0] > 0

    def _fit_to_screen(self) -> None:
        """Open no larger than the screen's free area (a 1280×720 laptop screen at 150 % is 853×480)."""
        app = QApplication.instance()
        screen = app.primaryScreen() if isinstance(app, QApplication) else None
        if screen is not None:
            free = screen.availableGeometry()
            self.resize(min(self.width(), free.width()), min(self.height(), free.height() - 40))

    def focus_search(self) -> None:
        if not self.sidebar_shown():
            self.toggle_sidebar()
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # ----- lifecycle -------------------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt naming
        super().showEvent(event)
        if not getattr(self, "_started", False):
            self._started = True
            QTimer.singleShot(0, self.controller.start)
            from hisho.gui.models.models_page import offer_unfinished

            offer_unfinished(self)  # downloads an earlier run left unfinished

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt naming
        self.controller.shutdown()
        event.accept()


def _theme_slot(controller: ChatController, name: str) -> Callable[[], object]:
    return lambda: controller.set_theme(name)
