"""Smaller things of issue 11 point 8, checked on the real window: search results show their matching text on
two lines with the match in bold; the chat list keeps its width whatever is selected, badged or searched; the
dialogs that have nothing to grow are fixed-size (no resize handle along their bottom edge: Chat settings,
Rename…, Save as preset); the paperclip is drawn, not an emoji glyph that may be missing."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QDialog, QLineEdit
from pytestqt.qtbot import QtBot

from hisho.gui.chat.sidebar import SNIPPET_ROLE, snippet_html
from hisho.gui.settings.preferences import open_preferences
from hisho.gui.settings.settings_dialog import ConversationSettingsDialog
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import settle, wait_for

LONG = ("To keep memory low, read the file with pandas in chunks of one hundred thousand rows, filter each "
        "chunk by date, and append the kept rows to a list you concatenate once at the end.")


def test_snippet_html_bolds_the_match_and_keeps_the_text_s_own_brackets() -> None:
    assert snippet_html("…keep chunk[chunk.date] and [chunks]…", "chunks") == \
        "…keep chunk[chunk.date] and <b>chunks</b>…"
    assert snippet_html("a <b> [tag]", "tag") == "a &lt;b&gt; <b>tag</b>"


def test_search_rows_show_two_lines_of_the_match_and_the_list_keeps_its_width(
        qtbot: QtBot, window: MainWindow) -> None:
    w = window
    store = w.ctx.store
    ids = []
    for i in range(6):
        conv = store.create(f"Chat {i} with a title long enough to be elided in the list")
        store.add_message(conv.id, "user", LONG if i == 3 else f"hello {i}")
        ids.append(conv.id)
    w.controller.refresh(ids[0])
    wait_for(qtbot, lambda: set(ids) <= set(w.sidebar.ids()))
    widths = {w.sidebar.width()}
    for cid in ids[:4]:
        w.controller.select(cid)
        wait_for(qtbot, lambda cid=cid: w.controller.current is not None and w.controller.current.id == cid)
        widths.add(w.sidebar.width())
    w.sidebar.set_kv({cid: ("123 MiB · 45 s", "saved") for cid in ids[:3]}, ("", ""))
    settle(qtbot)
    widths.add(w.sidebar.width())

    w.sidebar.search.setText("concatenate")
    wait_for(qtbot, lambda: w.sidebar.ids() == [ids[3]])
    settle(qtbot)
    widths.add(w.sidebar.width())
    item = w.sidebar.list.item(1)
    assert "<b>concatenate</b>" in item.data(SNIPPET_ROLE) and item.text().startswith("Chat 3")
    line = QFontMetrics(w.sidebar.list.font()).lineSpacing()
    height = w.sidebar.list.visualItemRect(item).height()
    assert height >= 2.5 * line, (height, line)       # the title and two lines of the match (was one line)
    w.sidebar.search.clear()
    settle(qtbot)
    widths.add(w.sidebar.width())
    # Offscreen, at the window's opening size (800 px, near its minimum), the list went 260 → 228 px when the
    # first chat was selected: the header's elided labels had a minimum that grew with their text.
    assert len(widths) == 1, f"the chat list changed width: {sorted(widths)}"


def test_dialogs_with_nothing_to_grow_are_fixed_size(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    conv = w.ctx.store.create("Settings")
    dialog = ConversationSettingsDialog(conv, [("", "Default model")], w)
    assert dialog.minimumSize() == dialog.maximumSize() and dialog.width() >= 520
    seen: list[tuple[str, bool, int]] = []

    def answer(title: str, text: str | None) -> None:
        """When the dialog titled ``title`` shows: note whether it is fixed-size and its width, then type
        ``text`` and press OK (None: Cancel)."""
        def look() -> None:
            for top in QApplication.topLevelWidgets():
                if isinstance(top, QDialog) and top.isVisible() and top.windowTitle() == title:
                    seen.append((title, top.minimumSize() == top.maximumSize(), top.width()))
                    field = top.findChild(QLineEdit)
                    if text is None or field is None:
                        top.reject()
                        return
                    field.setText(text)
                    qtbot.keyClick(field, Qt.Key.Key_Return)
                    return
            QTimer.singleShot(50, look)

        QTimer.singleShot(50, look)

    renamed: list[tuple[int, str]] = []
    w.sidebar.rename_requested.connect(lambda cid, t: renamed.append((cid, t)))
    answer("Rename chat", "  Trip to Lisbon ")
    w.sidebar.ask_rename(conv.id, "Settings")
    answer("Rename chat", None)
    w.sidebar.ask_rename(conv.id, "Settings")
    assert renamed == [(conv.id, "Trip to Lisbon")]        # Cancel renames nothing
    answer("Save as preset", "Lisbon guide")
    dialog.ask_preset_name()
    assert dialog.new_preset is not None and dialog.new_preset["name"] == "Lisbon guide"
    # Fixed-size like Chat settings (no resize handle under openbox), and wide enough for its title.
    assert [(t, fixed) for t, fixed, _ in seen] == [("Rename chat", True)] * 2 + [("Save as preset", True)]
    assert all(width >= 380 for _, _, width in seen)
    # Settings opened a second time (the first one was closed, so deleted) opens again instead of raising.
    first = open_preferences(w)
    first.close()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    settle(qtbot)
    second = open_preferences(w)
    assert second.isVisible()
    second.close()
    icon = w.composer.attach_button.icon()
    assert not icon.isNull() and w.composer.attach_button.text() == ""
