"""The main window's menu bar and its window-wide keys: File, Edit, View (with Theme), Chat, Help, Esc and Delete.

Rules of use: the window calls ``build_menus`` and ``build_shortcuts`` once, after its controller exists; every
entry is an operation of the controller or a method of the window, none does work here. The menus a test or
another part looks for stay on the window (``file_menu``, ``view_menu``, ``theme_menu``, ``stop_action``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence, QShortcut
from PySide6.QtWidgets import QMenu

from hisho.gui.shell.pages import CHATS

if TYPE_CHECKING:
    from hisho.gui.shell.controller import ChatController
    from hisho.gui.shell.main_window import MainWindow


def build_menus(w: MainWindow) -> None:
    c = w.controller
    bar = w.menuBar()
    w.file_menu = bar.addMenu("&File")
    _action(w.file_menu, "New chat", c.listing.new_chat, QKeySequence.StandardKey.New)
    w.file_menu.addAction(w.documents.action)
    w.file_menu.addSeparator()
    _action(w.file_menu, "Import chat…", c.listing.import_chat)
    _action(w.file_menu, "Export chat…", lambda: c.listing.export_chat(None))
    w.file_menu.addSeparator()
    # App settings (KV cache budget and type, what is stored); Ctrl+, is the chat's own settings.
    _action(w.file_menu, "Settings…", lambda: w.show_page("settings"), QKeySequence("Ctrl+Alt+S"))
    w.file_menu.addSeparator()
    _action(w.file_menu, "Quit", w.close, QKeySequence.StandardKey.Quit)
    edit = bar.addMenu("&Edit")
    _action(edit, "Undo delete", c.undo, QKeySequence.StandardKey.Undo)
    edit.addSeparator()
    _action(edit, "Find in chat", w.show_find, QKeySequence.StandardKey.Find)
    _action(edit, "Search chats", w.focus_search, QKeySequence("Ctrl+K"))
    w.view_menu = bar.addMenu("&View")
    _action(w.view_menu, "Show or hide the chat list", w.toggle_sidebar, QKeySequence("Ctrl+B"))
    _action(w.view_menu, "Chats", lambda: w.show_page(CHATS), QKeySequence("Ctrl+1"))
    _action(w.view_menu, "Models", lambda: w.show_page("models"), QKeySequence("Ctrl+M"))
    _action(w.view_menu, "Memory planner", lambda: w.show_page("planner"), QKeySequence("Ctrl+P"))
    w.view_menu.addSeparator()
    w.theme_menu = w.view_menu.addMenu("Theme")
    group = QActionGroup(w)
    chosen = str(w.ctx.settings["theme"])
    for name in ("system", "light", "dark"):
        # triggered(bool) passes "checked" to a slot that takes it: the name must come from a closure
        act = _action(w.theme_menu, name.capitalize(), _theme_slot(c, name))
        act.setCheckable(True)
        act.setChecked(name == chosen)
        group.addAction(act)
    chat = bar.addMenu("&Chat")
    w.stop_action = _action(chat, "Stop", c.sending.stop_here)
    # Enabled only where a reply is being written, like the message box's Stop (no shortcut: the menu's
    # opening is the only moment its state is seen).
    chat.aboutToShow.connect(lambda: w.stop_action.setEnabled(c.sending.generating_here()))
    _action(chat, "Regenerate last reply", c.editing.regenerate_last, QKeySequence("Ctrl+R"))
    _action(chat, "Rename chat", c.listing.start_rename, QKeySequence(Qt.Key.Key_F2))
    _action(chat, "Chat settings…", c.open_settings, QKeySequence("Ctrl+,"))
    help_menu = bar.addMenu("&Help")
    from hisho.gui.shell.help import show_about, show_shortcuts

    _action(help_menu, "Keyboard shortcuts", lambda: show_shortcuts(w), QKeySequence("Ctrl+/"))
    _action(help_menu, "Copy diagnostics", c.copy_diagnostics)
    help_menu.addSeparator()
    _action(help_menu, "About Hisho", lambda: show_about(w))


def build_shortcuts(w: MainWindow) -> None:
    esc = QShortcut(QKeySequence(Qt.Key.Key_Escape), w)
    esc.activated.connect(w.escape)
    w.find_edit.returnPressed.connect(w.controller.listing.find_next)
    # Delete on a chat selected in the list: soft delete with Undo, as the list's menu does. Only while the
    # list has the focus: in the message box and the search box Delete edits text.
    delete = QShortcut(QKeySequence(QKeySequence.StandardKey.Delete), w.sidebar.list)
    delete.setContext(Qt.ShortcutContext.WidgetShortcut)
    delete.activated.connect(w.delete_selected_chat)


def _action(menu: QMenu, text: str, slot: Callable[[], object],
            key: str | QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
    act = menu.addAction(text)
    act.triggered.connect(slot)
    if key is not None:
        act.setShortcut(key)
    return act


def _theme_slot(controller: ChatController, name: str) -> Callable[[], object]:
    return lambda: controller.set_theme(name)
