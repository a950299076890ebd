"""A narrow window and the keyboard: 700 px with the chat list collapsed to the rail, showing the list again
without widening the window, a header that keeps the title and the model's name at 1280 px, focus drawn on
buttons in the dark theme, Delete on a selected chat (with Undo), Esc in the search box, Help's shortcuts and
About."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QPushButton
from pytestqt.qtbot import QtBot

import hisho
from hisho.core import paths
from hisho.gui.shell import theme
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import QT_NOISE, settle, wait_for, wait_idle

TITLE = "What is the best way to read a CSV?"   # the header cut such a title to "What is …"


def test_700_px_with_the_list_over_the_chat_and_a_whole_header_at_1280(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    w.resize(700, 600)
    settle(qtbot)
    assert w.width() == 700, w.width()                 # it stopped at 792 with the list shown
    assert not w.sidebar_shown() and w.rail.isVisible()
    w.toggle_sidebar()                                 # ☰ / Ctrl+B
    settle(qtbot)
    assert w.sidebar_shown() and w.width() == 700      # showing the list widened the window to 792
    corner = w.sidebar.mapTo(w, QPoint(w.sidebar.width() - 1, w.sidebar.height() - 1))
    assert w.rect().contains(corner)
    qtbot.keyClick(w, Qt.Key.Key_Escape)               # Esc puts the list away
    assert not w.sidebar_shown() and w.width() == 700
    w.rail.buttons["chats"].click()                    # the rail's Chats, on Chats: the list comes out
    assert w.sidebar_shown() and w.width() == 700
    w.rail.buttons["chats"].click()
    assert not w.sidebar_shown()

    conv = w.ctx.store.create(TITLE)
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    w.resize(1280, 720)
    settle(qtbot)
    assert w.sidebar_shown() and w.sidebar.width() == 260   # beside the chat again, at its width (not squeezed)
    fm = w.title.fontMetrics()
    assert fm.horizontalAdvance(TITLE) <= w.title.contentsRect().width(), (w.title.width(), TITLE)
    name = w.model_label.text()
    assert name and w.model_picker.text() == name      # the model's whole name (it was "Smo…")
    wait_idle(qtbot, w)


def test_focus_on_buttons_is_drawn_in_the_dark_theme(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    w.controller.set_theme("dark")
    try:
        for button in (w.settings_button, w.sidebar.new_button, w.rail.buttons["models"]):
            assert isinstance(button, QPushButton)
            w.composer.focus()
            settle(qtbot, 0.05)
            plain = button.grab().toImage()
            button.setFocus(Qt.FocusReason.TabFocusReason)
            settle(qtbot, 0.05)
            assert button.hasFocus()
            focused = button.grab().toImage()
            assert focused.size() == plain.size()    # the ring does not change the button's size
            ring = QPoint(1, focused.height() // 2)
            assert focused.pixelColor(ring) != plain.pixelColor(ring), button.text()
    finally:
        w.controller.set_theme("system")


def test_delete_key_on_a_selected_chat_with_undo_and_esc_clears_search(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    keep = w.ctx.store.create("Keep me")
    gone = w.ctx.store.create("Delete me")
    w.controller.refresh(gone.id)
    w.controller.select(gone.id)
    wait_for(qtbot, lambda: gone.id in w.sidebar.ids() and w.controller.current is not None)
    w.sidebar.select(gone.id)
    w.sidebar.list.setFocus()
    qtbot.keyClick(w.sidebar.list, Qt.Key.Key_Delete)
    wait_for(qtbot, lambda: gone.id not in w.sidebar.ids())
    assert keep.id in w.sidebar.ids() and "Deleted" in w.toast.text() and w.toast.label_is_undo()
    w.toast.trigger_action()                           # Undo
    wait_for(qtbot, lambda: gone.id in w.sidebar.ids())

    w.focus_search()
    qtbot.keyClicks(w.sidebar.search, "Keep")
    assert w.sidebar.search.text() == "Keep"
    qtbot.keyClick(w.sidebar.search, Qt.Key.Key_Escape)
    assert w.sidebar.search.text() == ""               # Esc did nothing in the search box
    qtbot.keyClick(w.sidebar.search, Qt.Key.Key_Escape)
    assert not w.sidebar.search.hasFocus()             # a second Esc goes back to the message box
    wait_idle(qtbot, w)


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")   # the dialogs, offscreen
def test_help_lists_the_shortcuts_and_says_about_this_hisho(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    help_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Help")
    texts = [a.text() for a in help_menu.actions()]
    assert "Keyboard shortcuts" in texts and "About Hisho" in texts
    next(a for a in help_menu.actions() if a.text() == "Keyboard shortcuts").trigger()
    shortcuts = w._shortcuts_dialog  # type: ignore[attr-defined]
    rows = dict((what, keys) for keys, what in shortcuts.rows)
    assert rows["View → Models"] == "Ctrl+M" and rows["File → New chat"] == "Ctrl+N"
    assert any(keys == "Delete" for keys, _ in shortcuts.rows)
    next(a for a in help_menu.actions() if a.text() == "About Hisho").trigger()
    about = w._about_dialog  # type: ignore[attr-defined]
    text = about.table.text()
    assert hisho.__version__ in text and "llama-cpp-python 0." in text and str(paths.data_dir()) in text
    assert str(paths.models_dir()) in text
    screen = w.screen().availableGeometry()
    for dialog in (shortcuts, about):
        assert screen.contains(dialog.frameGeometry()) or screen.contains(dialog.geometry())
        dialog.close()
    settle(qtbot, 0.05)
    assert theme.current() is not None
