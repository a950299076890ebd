"""The main window: sidebar | header + chat view (or the empty state) + composer, status bar; its menus and
window-wide keys are built by ``hisho.gui.shell.menus``.

Layout and wiring only; every user action is an operation in ``hisho.gui.shell.controller``. Other features plug in
here with small additions: the File menu (documents: import, drop zone), the View menu (the memory planner
panel), and the signals ``conversation_selected`` / ``draft_changed`` / ``turn_finished`` (KV prefetch and
type-ahead).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from hisho.gui.chat.attach import AttachController
from hisho.gui.chat.chat_view import ChatView
from hisho.gui.chat.composer import Composer
from hisho.gui.chat.documents import DocumentsController
from hisho.gui.chat.sidebar import Sidebar
from hisho.gui.shell.chat_list_place import MIN_WIDTH, ChatListPlace
from hisho.gui.shell.context import AppContext
from hisho.gui.shell.controller import ChatController
from hisho.gui.shell.menus import build_menus, build_shortcuts
from hisho.gui.shell.model_picker import NAME_MAX, ModelNameLabel, ModelPicker
from hisho.gui.shell.pages import CHATS, NavRail, PageHost
from hisho.gui.shell.state_bridge import StateBridge
from hisho.gui.shell.status_bar import ContextMeter, StatusBar
from hisho.gui.shell.toast import Toast
from hisho.gui.shell.widgets import ElidedLabel

if TYPE_CHECKING:
    from hisho.core.appstate import Now
    from hisho.gui.chat.kv_status import KVUsageView
    from hisho.gui.models.models_page import ModelsPage
    from hisho.gui.settings.preferences import PreferencesDialog

log = logging.getLogger("hisho.gui")

METER_MAX = 190
NARROW_HEADER = 760
NAME_NARROW = 120
SUGGESTIONS = ("Explain how a transformer model works, simply", "Write a Python function that reverses a list",
               "Give me three ideas for a weekend trip", "Summarize the pros and cons of remote work")


class MainWindow(QMainWindow):
    conversation_selected = Signal(int)     # the chat on screen changed (id)
    draft_changed = Signal(int, str)        # the unsent text of a chat changed (debounced)
    turn_finished = Signal(object)          # hisho.core.conversations.chat.TurnResult, after the reply is saved

    # What the parts plugged in from other modules keep on the window (their Protocols name these,
    # hisho.gui.shell.protocols); each is set by the part named.
    model_picker: ModelPicker | None = None      # hisho.gui.shell.model_picker.attach_picker
    kv_usage: KVUsageView | None = None          # hisho.gui.chat.kv_status.wire
    last_restore_notice = ""                     # hisho.gui.chat.waits.watch_restores: the last "Restored …"
    remove_data_on_exit = False                  # Settings → Your data
    _models_page: ModelsPage | None = None       # the pages, once built (hisho.gui.shell.page_setup)
    _preferences: PreferencesDialog | None = None
    _cache_shown = False                         # hisho.gui.shell.remote_switch
    _remote_help: QMessageBox | None = None
    _state_key = ""                              # what the shown reply figures were measured on
    file_menu: QMenu                             # the menu bar's, made by hisho.gui.shell.menus.build_menus
    view_menu: QMenu
    theme_menu: QMenu
    stop_action: QAction

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.state = StateBridge(ctx.state, ctx.executor.post, self)   # what answers now, for every screen
        self.setWindowTitle("Hisho")
        self.resize(1240, 820)
        # Its own minimum, not its layout's (the chat list beside the chat): narrower, the list collapses to
        # the rail (hisho.gui.shell.chat_list_place).
        self.setMinimumSize(MIN_WIDTH, 420)
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
        build_menus(self)
        build_shortcuts(self)
        # the paperclip and files dropped on the message box: attach them to this chat
        self.attach = AttachController(self, self.controller, self.composer, self.documents)
        self.documents.pictures_dropped.connect(self.composer.images_given)
        from hisho.gui.shell.model_picker import attach_picker

        attach_picker(self)  # header: switch model in one click
        from hisho.gui.shell.page_setup import add_pages

        add_pages(self)      # Models, Memory planner, Settings: pages beside Chats, on the rail
        from hisho.gui.models.first_start import attach_first_start

        attach_first_start(self)  # the bundled model is a demo: offer one that fits
        from hisho.gui.models.first_measure import start_first_measure

        start_first_measure(self)  # no speed profile yet: measure this computer once, in the background
        self._attach_tools()
        if ctx.problem:
            self.show_banner(ctx.problem)
        self.state.changed.connect(self.show_state)

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
        self.toast.covering.connect(self.view.reserve_bottom)   # the last reply's actions stay above it
        self.splitter = QSplitter()
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, 980])
        self.splitter.setHandleWidth(1)
        self.splitter.setCollapsible(0, True)   # drag it away, or Ctrl+B / the header's ☰
        self.splitter.setCollapsible(1, False)
        chats = QWidget()
        chats.setObjectName("ChatsPage")
        cl = QHBoxLayout(chats)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.splitter)
        self.list_place = ChatListPlace(self.splitter, self.sidebar, right, chats)
        self.host = PageHost(chats)
        self.rail = NavRail()
        central = QWidget()
        lay = QHBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.rail)
        lay.addWidget(self.host, 1)
        self.setCentralWidget(central)

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
        self.model_label = ModelNameLabel()   # shown by the model picker, which is the model's name in the header
        self.model_label.setObjectName("Meta")
        self.context_meter = ContextMeter()
        self.meter = self.context_meter.bar
        self.meter_label = self.context_meter.label
        self.settings_button = QPushButton("Chat settings")
        self.settings_button.setToolTip("Model, system prompt and sampling for this chat (Ctrl+,)")
        # The title takes the room that is left; the model's name and the meter take what they need (the meter
        # at most METER_MAX): spread 3:1:2 they cut a title to "What is …" and the model to "Smo…" at 1280 px.
        self.context_meter.setMaximumWidth(METER_MAX)
        self.model_label.hide()
        lay.addWidget(self.sidebar_button)
        lay.addWidget(self.title, 1)
        lay.addSpacing(8)
        lay.addWidget(self.model_label)
        lay.addWidget(self.context_meter)
        lay.addSpacing(4)
        lay.addWidget(self.settings_button)
        header.installEventFilter(self)   # a narrow header gives the title the room first (_fit_header)
        self.header = header
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

    # ----- what the chat presenter shows (``ChatWindow``) and the summary's progress ---------------------

    def show_toast(self, text: str, undo: Callable[[], None] | None, label: str, ms: int) -> None:
        self.toast.show_message(text, undo, label, ms)

    def toast_undo(self) -> bool:
        """Run the toast's Undo if it offers one; True when it did."""
        return self.toast.label_is_undo() and self.toast.trigger_action()

    def dismiss_toast(self, prefix: str) -> None:
        """Hide the toast now if its text starts with ``prefix``."""
        if self.toast.text().startswith(prefix):
            self.toast.dismiss()

    def show_model_status(self, text: str, n_ctx: int | None = None) -> None:
        self.status.set_model(text, n_ctx)

    def show_load_stop(self, shown: bool) -> None:
        """The status bar's Stop for a model load: shown and clickable, or hidden."""
        if shown:
            self.status.stop_load.setEnabled(True)
        self.status.stop_load.setVisible(shown)

    def disable_load_stop(self) -> None:
        """The load's Stop was clicked: it stays in sight, greyed, until the load ends."""
        self.status.stop_load.setEnabled(False)

    def show_local_engine(self, engine_info: dict[str, object], gpu_layers: int, pid: int | None) -> None:
        """This computer's engine answers: where it runs (CPU or GPU offload) and its process, in the status
        bar; its saved KV is used again. The model's name comes from the app's state (``show_state``)."""
        self.sidebar.set_engine_note("")
        self.status.set_device(engine_info, gpu_layers)
        self.status.engine_pid = pid
        self.show_state(self.state.now)

    def show_state(self, now: Now) -> None:
        """What answers now (the app's one state, ``hisho.core.appstate``): its name in the header, the status
        bar and the empty chat. A load, or another model, clears the reply figures until it has answered: the
        last model's speed is not this one's. ``now.base``: a base model (no chat template), marked as such,
        since it continues text rather than answering it. The engine's queue goes to the status bar, read
        fresh (changes from two threads may arrive out of order; the last word is the state's)."""
        self.status.show_queue(self.state.now.queue)
        if now.key != self._state_key or not now.loaded:
            self.status.set_reply_figures(None, None)
        self._state_key = now.key if now.loaded else ""
        if not now.loaded:
            return   # the controller says that it loads, or why nothing answers
        name = now.model.display
        self.status.set_model(name, now.n_ctx or None)
        self.model_label.setText(f"{name} · base model" if now.base else name)
        if not now.remote:   # a remote engine's line names its server too (remote_switch.connected)
            self.empty_subtitle.setText(
                f"{name} is a base model, not a chat model: it continues the text you send rather than answering "
                "it." if now.base else f"Chatting with {name}, on this computer. Nothing leaves it.")

    def add_status_widget(self, widget: QWidget) -> None:
        self.status.addPermanentWidget(widget)

    # ----- menus (hisho.gui.shell.menus) and keys ---------------------------------------------------------

    def _connect_documents(self) -> None:
        docs, c = self.documents, self.controller
        docs.notice.connect(lambda text, ms: c.toast(text, ms=ms))
        docs.failed.connect(c.report)
        docs.ended.connect(c.sending.pump)

        def show(cid: int) -> None:
            c.refresh(select=cid)
            c.select(cid)

        docs.opened.connect(show)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is getattr(self, "header", None) and event.type() == QEvent.Type.Resize:
            self._fit_header(self.header.width())
            return False
        if obj is getattr(self, "find_edit", None) and event.type() == QEvent.Type.KeyPress and \
                isinstance(event, QKeyEvent) and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.controller.listing.find_previous()
            return True
        return super().eventFilter(obj, event)

    def escape(self) -> None:
        search = self.sidebar.search
        if self.host.current_name() != CHATS:
            field, page = self.focusWidget(), self.host.currentWidget()
            typing = isinstance(field, QLineEdit | QPlainTextEdit | QTextEdit) and field.isVisible() and \
                page is not None and page.isAncestorOf(field)
            if not typing:               # Esc in a page's text field is the field's (a search box keeps it)
                self.host.back()
        elif search.hasFocus() or (search.text() and self.sidebar.isAncestorOf(self.focusWidget())):
            if search.text():
                search.clear()           # the whole list again
            else:
                self.composer.focus()
            self.list_place.put_away()
        elif self.controller.sending.generating_here():
            self.controller.sending.stop_here()
        elif self.find_bar.isVisible():
            self.hide_find()
        elif self.composer.editing_id is not None:
            self.composer.cancel_edit()  # the draft typed before the edit comes back
        else:
            self.list_place.put_away()

    def delete_selected_chat(self) -> None:
        item = self.sidebar.list.currentItem()
        cid = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if cid is not None:
            self.controller.delete_chat(int(cid))

    def _fit_header(self, width: int) -> None:
        """Below NARROW_HEADER px the model's name and the meter take less, so the title keeps ~20 characters."""
        narrow = width < NARROW_HEADER
        self.context_meter.setMaximumWidth(METER_MAX // 2 + 10 if narrow else METER_MAX)
        picker = self.model_picker
        if picker is not None:
            picker.show_name(room=NAME_NARROW if narrow else NAME_MAX)

    def show_page(self, name: str) -> QWidget:
        """Show a page of the window (Chats, Models, Memory planner, Settings); the rail marks it."""
        return self.host.show_page(name)

    def show_find(self) -> None:
        self.find_bar.show()
        self.find_edit.setFocus()
        self.find_edit.selectAll()

    def hide_find(self) -> None:
        self.find_bar.hide()
        self.composer.focus()

    def toggle_sidebar(self) -> None:
        """Hide the chat list (hidden, not just squeezed: the window may then be narrower), or bring it back
        (over the chat when the window is narrow: showing it never widens the window)."""
        self.host.back()
        self.list_place.toggle()

    def sidebar_shown(self) -> bool:
        return self.list_place.shown()

    def _fit_to_screen(self) -> None:
        """Open no larger than the screen's free area (a 1280×720 laptop screen at 150 % is 853×480)."""
        app = QApplication.instance()
        screen = app.primaryScreen() if isinstance(app, QApplication) else None
        if screen is not None:
            free = screen.availableGeometry()
            self.resize(min(self.width(), free.width()), min(self.height(), free.height() - 40))

    def focus_search(self) -> None:
        self.host.back()
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

    def _attach_tools(self) -> None:
        """MCP tools in the chats (docs/tools.md): servers start with the window when configured; the message box
        shows how many tools the model may call. ``Services.close`` stops them."""
        from hisho.gui.chat.tool_session import ChatTools
        from hisho.gui.chat.tools_button import ToolsButton

        self.chat_tools = ChatTools(self)
        self.tools_button = ToolsButton(self.chat_tools)
        self.composer.button_row.insertWidget(1, self.tools_button)
        self.state.changed.connect(self.tools_button.update_label)
        self.chat_tools.settings_requested.connect(self._open_tool_settings)
        self.chat_tools.start()

    def _open_tool_settings(self) -> None:
        from hisho.gui.settings.preferences import open_preferences

        open_preferences(self).show_section("Tools")

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt naming
        self.documents.cancel()  # a summary stops at its next step; what it read is kept (resumable)
        self.controller.shutdown()
        event.accept()

