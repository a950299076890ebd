"""The main window: sidebar | header + chat view (or the empty state) + composer, menus, shortcuts, status bar.

Layout and wiring only; every user action is an operation in ``hisho.gui.controller``. Other features plug in
here with small additions: the File menu (documents: import, drop zone), the View menu (the memory planner
panel), and the signals ``conversation_selected`` / ``draft_changed`` / ``turn_finished`` (KV prefetch and
type-ahead).
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from hisho.gui.chat_view import ChatView
from hisho.gui.composer import Composer
from hisho.gui.context import AppContext
from hisho.gui.controller import ChatController
from hisho.gui.documents import DocumentsController
from hisho.gui.sidebar import Sidebar
from hisho.gui.status_bar import StatusBar

log = logging.getLogger("hisho.gui")

SUGGESTIONS = ("Explain how a transformer model works, simply", "Write a Python function that reverses a list",
               "Give me three ideas for a weekend trip", "Summarize the pros and cons of remote work")


class MainWindow(QMainWindow):
    conversation_selected = Signal(int)     # the chat on screen changed (id)
    draft_changed = Signal(int, str)        # the unsent text of a chat changed (debounced)
    turn_finished = Signal(object)          # hisho.core.chat.TurnResult, after the reply is saved

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.setWindowTitle("Hisho")
        self.resize(1240, 820)
        self.sidebar = Sidebar()
        self.view = ChatView()
        self.composer = Composer()
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self._build_center()
        self.controller = ChatController(self)
        self._build_menus()
        self._build_shortcuts()
        self.documents = DocumentsController(self)  # drop zone, File → Summarize…, summary progress
        from hisho.gui.model_picker import attach_picker

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
        self.splitter = QSplitter()
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([270, 970])
        self.splitter.setHandleWidth(1)
        self.setCentralWidget(self.splitter)

    def _build_header(self) -> QWidget:
        header = QFrame()
        header.setObjectName("Header")
        lay = QHBoxLayout(header)
        lay.setContentsMargins(20, 10, 14, 10)
        self.title = QLabel("New chat")
        self.title.setObjectName("HeaderTitle")
        self.model_label = QLabel("")
        self.model_label.setObjectName("Meta")
        self.meter = QProgressBar()
        self.meter.setObjectName("ContextMeter")
        self.meter.setTextVisible(False)
        self.meter.setFixedWidth(120)
        self.meter.setRange(0, 1000)
        self.meter_label = QLabel("")
        self.meter_label.setObjectName("Meta")
        self.settings_button = QPushButton("Chat settings")
        self.settings_button.setToolTip("Model, system prompt and sampling for this chat")
        lay.addWidget(self.title)
        lay.addSpacing(10)
        lay.addWidget(self.model_label)
        lay.addStretch(1)
        lay.addWidget(self.meter_label)
        lay.addWidget(self.meter)
        lay.addSpacing(10)
        lay.addWidget(self.settings_button)
        return header

    def _build_find_bar(self) -> QWidget:
        bar = QFrame()
        bar.setObjectName("FindBar")
        lay = QHBoxLayout(bar)
        lay.setContentsMargins(20, 6, 14, 6)
        self.find_edit = QLineEdit()
        self.find_edit.setPlaceholderText("Find in this chat — Enter for the next match, Esc to close")
        self.find_status = QLabel("")
        self.find_status.setObjectName("Meta")
        close = QPushButton("Close")
        close.setObjectName("Flat")
        close.clicked.connect(self.hide_find)
        lay.addWidget(self.find_edit, 1)
        lay.addWidget(self.find_status)
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
            b.setMinimumWidth(300)
            b.clicked.connect(lambda _=False, t=text: self._use_suggestion(t))
            chips.addWidget(b, i // 2, i % 2)
            self.suggestions.append(b)
        box.addLayout(chips)
        grid.addLayout(box, 0, 0, Qt.AlignmentFlag.AlignCenter)
        return page

    def _use_suggestion(self, text: str) -> None:
        self.composer.set_text(text)
        self.composer.edit.setFocus()

    def show_empty(self, empty: bool) -> None:
        self.pages.setCurrentWidget(self.empty if empty else self.view)

    def show_banner(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.setVisible(bool(text))

    # ----- menus and keys --------------------------------------------------------------------------------

    def _build_menus(self) -> None:
        c = self.controller
        bar = self.menuBar()
        self.file_menu: QMenu = bar.addMenu("&File")
        self._action(self.file_menu, "New chat", c.new_chat, QKeySequence.StandardKey.New)
        self.file_menu.addSeparator()
        self._action(self.file_menu, "Import chat…", c.import_chat)
        self._action(self.file_menu, "Export chat…", lambda: c.export_chat(None))
        self.file_menu.addSeparator()
        from hisho.gui.preferences import open_preferences

        # App settings (KV cache budget and type, what is stored); Ctrl+, is the chat's own settings.
        self._action(self.file_menu, "Settings…", lambda: open_preferences(self), QKeySequence("Ctrl+Alt+S"))
        self.file_menu.addSeparator()
        self._action(self.file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)
        edit = bar.addMenu("&Edit")
        self._action(edit, "Find in chat", self.show_find, QKeySequence.StandardKey.Find)
        self._action(edit, "Search chats", self.focus_search, QKeySequence("Ctrl+K"))
        self.view_menu: QMenu = bar.addMenu("&View")
        self._action(self.view_menu, "Show sidebar", lambda: self.sidebar.setVisible(not self.sidebar.isVisible()),
                     QKeySequence("Ctrl+B"))
        from hisho.gui.planner_panel import open_planner

        self._action(self.view_menu, "Memory planner", lambda: open_planner(self))
        from hisho.gui.models_page import open_models

        self._action(self.view_menu, "Models", lambda: open_models(self), QKeySequence("Ctrl+M"))
        theme_menu = self.view_menu.addMenu("Theme")
        for name in ("system", "light", "dark"):
            self._action(theme_menu, name.capitalize(), lambda n=name: c.set_theme(n))
        chat = bar.addMenu("&Chat")
        self._action(chat, "Stop", c.stop)
        self._action(chat, "Regenerate last reply", c.regenerate_last, QKeySequence("Ctrl+R"))
        self._action(chat, "Rename chat", c.start_rename, QKeySequence(Qt.Key.Key_F2))
        self._action(chat, "Chat settings…", c.open_settings, QKeySequence("Ctrl+,"))
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "Copy diagnostics", c.copy_diagnostics)

    def _action(self, menu: QMenu, text: str, slot: object, key: object = None) -> QAction:
        act = menu.addAction(text)
        act.triggered.connect(slot)
        if key is not None:
            act.setShortcut(key)  # type: ignore[arg-type]
        return act

    def _build_shortcuts(self) -> None:
        esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), self)
        esc.activated.connect(self.escape)
        self.find_edit.returnPressed.connect(self.controller.find_next)

    def escape(self) -> None:
        if self.controller.active is not None or self.controller.running is not None:
            self.controller.stop()
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
        self.composer.edit.setFocus()

    def focus_search(self) -> None:
        self.sidebar.setVisible(True)
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # ----- lifecycle -------------------------------------------------------------------------------------

    def showEvent(self, event: object) -> None:  # noqa: N802 - Qt naming
        super().showEvent(event)  # type: ignore[arg-type]
        if not getattr(self, "_started", False):
            self._started = True
            QTimer.singleShot(0, self.controller.start)
            from hisho.gui.models_page import offer_unfinished

            offer_unfinished(self)  # downloads an earlier run left unfinished

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt naming
        self.controller.shutdown()
        event.accept()
