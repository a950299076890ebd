"""The window under real use (issue 11): switching chats while a reply streams, sending while the engine is
busy, honest figures, delete and Undo, the dark theme, small screens, documents without an extension."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import STREAMING, ChatSettings
from hisho.core.documents.job import JobProgress
from hisho.gui.shell import theme
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle
from tests.gui.test_chat_window import (
    FACTS,
    STORY,
    answer_box,
    fill_chat,
    open_chat,
    streaming_text,
    type_and_enter,
)

SHORT = ChatSettings(temperature=0.0, max_tokens=16, repeat_penalty=1.0)
LONG = ChatSettings(temperature=0.0, max_tokens=400, repeat_penalty=1.0)


def story_streaming(qtbot: QtBot, w: MainWindow, other_title: str = "Fruit") -> tuple[int, int]:
    """A long reply streaming in chat "story", with a short chat beside it: (story's id, the other's id)."""
    cid = open_chat(qtbot, w, LONG, title="story")
    other = open_chat(qtbot, w, SHORT, title=other_title)
    w.controller.select(cid)
    wait_for(qtbot, lambda: w.view.conversation_id == cid)
    type_and_enter(qtbot, w, STORY)
    wait_for(qtbot, lambda: bool(streaming_text(w).strip()))
    return cid, other


def on_screen(w: MainWindow) -> list[QWidget]:
    """The widgets in the chat column's layout, top to bottom (whatever the view's bookkeeping says)."""
    rows = w.view.rows
    items = [rows.itemAt(i) for i in range(rows.count())]
    return [it.widget() for it in items if it is not None and it.widget() is not None]


def test_switching_chats_mid_reply_shows_the_reply_once_and_leaves_no_ghost(qtbot: QtBot,
                                                                            window: MainWindow) -> None:
    w = window
    other = open_chat(qtbot, w, SHORT, title="quiet chat")
    w.ctx.store.add_message(other, "user", "untouched")
    cid = open_chat(qtbot, w, LONG, title="story")
    type_and_enter(qtbot, w, STORY)
    wait_for(qtbot, lambda: len(streaming_text(w)) > 20)
    w.controller.select(other)
    wait_for(qtbot, lambda: w.view.conversation_id == other)
    turn = w.controller.running  # the Turn, whose text is the reply so far
    assert turn is not None
    grown = len(turn.text) + 40
    wait_for(qtbot, lambda: len(turn.text) > grown)  # text produced while the chat is not on screen
    w.controller.select(cid)
    wait_for(qtbot, lambda: w.view.conversation_id == cid and len(streaming_text(w)) > grown)
    shown = streaming_text(w)
    assert turn.text.startswith(shown)  # once: not the text so far plus the pieces produced meanwhile
    assert all(m.status != STREAMING for m in w.view.messages)  # the saved partial row is not a second copy
    assert on_screen(w)[-1] is w.view.stream_widget
    w.controller.stop()
    wait_idle(qtbot, w)
    branch = w.ctx.store.branch(cid)
    wait_for(qtbot, lambda: [m.id for m in w.view.messages] == [m.id for m in branch])
    assert on_screen(w) == [w.view.widgets[m.id] for m in branch]  # no stale copy above the question
    w.controller.select(other)
    wait_for(qtbot, lambda: w.view.conversation_id == other)
    assert [x.text for x in on_screen(w)] == ["untouched"]  # and none carried into another chat


def test_a_message_sent_while_busy_waits_visibly_and_is_sent_once(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    cid, other = story_streaming(qtbot, w)
    assert w.composer.button.text() == "Stop"
    w.controller.select(other)
    wait_for(qtbot, lambda: w.view.conversation_id == other)
    assert w.composer.button.text() == "Send"  # Stop shows only in the chat whose reply is being written
    type_and_enter(qtbot, w, "Name a fruit.")
    for _ in range(3):  # impatient Enters: the box is empty now, nothing more is sent
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    type_and_enter(qtbot, w, "A second thought I will take back.")
    assert len(w.view.queued) == 2 and w.composer.text() == ""
    first, second = list(w.view.queued.values())
    assert first.text == "Name a fruit." and "Waiting for the reply in “story”" in first.meta.text()
    qtbot.mouseClick(second.buttons["cancel"], Qt.MouseButton.LeftButton)
    assert len(w.view.queued) == 1 and w.composer.text() == "A second thought I will take back."
    assert w.ctx.store.messages(other) == []  # nothing is sent while the engine is busy
    w.controller.stop()
    wait_for(qtbot, lambda: len(w.ctx.store.branch(other)) == 2)
    wait_idle(qtbot, w)
    assert [(m.role, m.content) for m in w.ctx.store.messages(other)][:1] == [("user", "Name a fruit.")]
    assert len(w.ctx.store.messages(other)) == 2 and not w.view.queued  # sent exactly once
    assert w.composer.text() == "A second thought I will take back."


def test_figures_belong_to_their_chat_and_are_live_while_streaming(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    full = open_chat(qtbot, w, SHORT, title="full")
    fill_chat(w, full, 1200)
    w.controller.select(full)

    def used() -> int:
        return int(w.meter_label.text().split()[0].replace(",", "")) if w.meter_label.text()[:1].isdigit() else -1

    wait_for(qtbot, lambda: used() > 1200)
    full_label = w.meter_label.text()
    empty = open_chat(qtbot, w, LONG, title="empty")
    assert w.meter_label.text() != full_label  # never the previous chat's figure
    wait_for(qtbot, lambda: w.meter_label.text().endswith("/ 4,096 tokens"))
    assert 0 <= used() < 100
    type_and_enter(qtbot, w, STORY)
    wait_for(qtbot, lambda: "(live)" in w.status.speed.text() and "ms" in w.status.ttft.text())
    wait_for(qtbot, lambda: w.context_meter.live)
    during = used()
    assert during > 0
    wait_for(qtbot, lambda: used() > during, timeout=300_000)  # the meter grows with the reply
    w.controller.select(full)
    wait_for(qtbot, lambda: w.view.conversation_id == full)
    assert w.meter_label.text() == full_label  # its own figure at once, though the engine is busy
    w.controller.stop()
    wait_idle(qtbot, w)
    assert "(live)" not in w.status.speed.text() and "tok/s" in w.status.speed.text()
    w.controller.select(empty)
    wait_for(qtbot, lambda: w.view.conversation_id == empty)
    w.composer.set_text("ten short words are in this message to count here")
    wait_for(qtbot, lambda: w.composer.tokens.text().endswith("tokens"))
    assert int(w.composer.tokens.text().split()[0]) <= 13  # the text's own tokens, without the template
    assert "chat template" in w.composer.tokens.toolTip() and "chat template" in w.meter_label.toolTip()


def test_deleting_asks_how_many_go_and_undo_brings_them_back(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    cid = open_chat(qtbot, w, SHORT)
    parent = None
    for i, role in enumerate(("user", "assistant", "user", "assistant")):
        parent = w.ctx.store.add_message(cid, role, f"message {i}", parent_id=parent.id if parent else None)
    w.controller.select(cid)
    wait_for(qtbot, lambda: len(w.view.messages) == 4)
    before = [(m.id, m.content) for m in w.ctx.store.branch(cid)]
    first = w.view.messages[0].id
    seen: list[str] = []
    answer_box("Cancel", seen)
    qtbot.mouseClick(w.view.widgets[first].buttons["delete"], Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: bool(seen))
    assert "Delete this message and the 3 messages after it?" in seen[0]
    wait_idle(qtbot, w)
    assert len(w.ctx.store.branch(cid)) == 4  # Cancel: nothing deleted
    answer_box("Delete", seen)
    qtbot.mouseClick(w.view.widgets[first].buttons["delete"], Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: w.ctx.store.branch(cid) == [] and w.view.messages == [])
    assert w.toast.isVisible() and w.toast.action_button.isVisible() and "Deleted 4 messages" in w.toast.text()
    qtbot.wait(3000)
    assert w.toast.isVisible()  # seen for several seconds
    w.composer.edit.setFocus()
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Z undoes it
    wait_for(qtbot, lambda: [(m.id, m.content) for m in w.ctx.store.branch(cid)] == before)
    wait_for(qtbot, lambda: len(w.view.messages) == 4)
    last = w.view.messages[-1].id
    qtbot.mouseClick(w.view.widgets[last].buttons["delete"], Qt.MouseButton.LeftButton)  # nothing after it
    wait_for(qtbot, lambda: len(w.ctx.store.branch(cid)) == 3)  # no question asked
    w.controller.delete_chat(cid)
    wait_for(qtbot, lambda: cid not in w.sidebar.ids())
    assert w.toast.isVisible() and w.toast.action_button.text() == "Undo"
    qtbot.mouseClick(w.toast.action_button, Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: cid in w.sidebar.ids() and w.controller.current is not None
             and w.controller.current.id == cid)


def test_view_theme_dark_changes_the_palette_and_is_remembered(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    view_menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&View")
    themes = next(a.menu() for a in view_menu.actions() if a.text() == "Theme")
    dark = next(a for a in themes.actions() if a.text() == "Dark")
    light = next(a for a in themes.actions() if a.text() == "Light")
    try:
        dark.trigger()  # what a click or the keyboard does
        assert app.palette().color(QPalette.ColorRole.Window).name() == theme.DARK.bg
        assert theme.current() is theme.DARK and dark.isChecked()
        assert w.ctx.settings["theme"] == "dark"
        light.trigger()
        assert app.palette().color(QPalette.ColorRole.Window).name() == theme.LIGHT.bg
    finally:
        w.controller.set_theme("system")


def test_small_screen_with_a_summary_running_and_a_file_without_extension(qtbot: QtBot, window: MainWindow,
                                                                          tmp_path: Path) -> None:
    w = window
    open_chat(qtbot, w, SHORT, title="A chat with a rather long title that must not widen the window at all")
    w.resize(1280, 720)
    qtbot.wait(50)
    widest = [w.minimumSizeHint().width()]
    licence = tmp_path / "LICENSE"  # no extension: read by its content
    licence.write_text("GNU GENERAL PUBLIC LICENSE\n\nEveryone may copy and share this text. " + FACTS)
    docs = w.documents
    docs.summarize([licence])

    def read() -> bool:  # past extraction: the file was accepted as text
        return docs.panel.stage.text().startswith(("Planning", "Summarizing", "Combining", "Opening"))

    while docs.running and not read():
        widest.append(w.minimumSizeHint().width())
        assert w.settings_button.geometry().right() <= w.width() and docs.panel.cancel.isVisible()
        qtbot.wait(100)
    assert docs.running, docs.last_result  # not refused ("unsupported file type 'none'" before)
    docs.panel.show_progress(JobProgress("summarizing", 3, 40, 754.0, "LICENSE", "chunk 3 of 40 of LICENSE, "
                                         "a document with a rather long name.txt"))
    widest.append(w.minimumSizeHint().width())
    assert "left" in docs.panel.eta.text()
    docs.cancel()
    wait_for(qtbot, lambda: not docs.running, timeout=600_000)
    assert max(widest) <= 900, widest  # far below 1280: fits 1366×768 and 1280×800 at 125–150 % too
    assert docs.last_result is not None and docs.last_result.cancelled and not docs.last_result.skipped
    assert not docs.panel.isVisible() and docs.panel.eta.text() == ""
    wait_idle(qtbot, w)
    w.toggle_sidebar()
    qtbot.wait(50)  # the layout settles
    assert not w.sidebar_shown() and w.minimumSizeHint().width() < max(widest) - 150
    qtbot.keyClick(w, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)
    assert w.sidebar_shown()
    from hisho.gui.models.planner_panel import open_planner

    panel = open_planner(w)
    qtbot.addWidget(panel)
    screen = w.screen().availableGeometry()
    assert screen.contains(panel.frameGeometry()) or screen.contains(panel.geometry())
    wait_idle(qtbot, w)
    panel.close()

