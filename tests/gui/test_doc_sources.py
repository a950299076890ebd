"""An answer about an attached document shows its sources (the passages, each opening its text) and the sent
bubble shows which document went with it; both come back when the chat is opened again."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel, QWidget
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import ChatSettings
from hisho.gui.chat.doc_sources import SourcesRow
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import message_ids, wait_for, wait_reply
from tests.gui.test_attach import FERRY, attached_after, drop_on_composer
from tests.gui.test_chat_window import open_chat, type_and_enter

ANSWER = ChatSettings(temperature=0.0, max_tokens=16, repeat_penalty=1.0)


def extras(w: MainWindow, role: str) -> dict[str, object]:
    widgets = [x for x in w.view.widgets.values() if x.message is not None and x.message.role == role]
    return dict(widgets[-1].extras) if widgets else {}


def test_answer_lists_its_sources_and_the_bubble_its_attachment(qtbot: QtBot, window: MainWindow,
                                                                 tmp_path: Path) -> None:
    w = window
    other = open_chat(qtbot, w, ANSWER, "Other")
    cid = open_chat(qtbot, w, ANSWER, "Island trip")
    notes = tmp_path / "harbour.txt"
    notes.write_text(FERRY + "\nThe museum on the quay opens at ten on weekdays.\n", encoding="utf-8")
    drop_on_composer(qtbot, w, notes)
    attached_after(qtbot, w, 0)
    known = message_ids(w, cid)
    type_and_enter(qtbot, w, "When does the ferry to Tern Island leave?")
    wait_reply(qtbot, w, cid, known)
    wait_for(qtbot, lambda: "sources" in extras(w, "assistant") and "attachments" in extras(w, "user"), 60_000)

    chips = extras(w, "user")["attachments"]
    assert isinstance(chips, QWidget)
    assert [c.text() for c in chips.findChildren(QLabel) if c.text()] == ["harbour.txt"]
    row = extras(w, "assistant")["sources"]
    assert isinstance(row, SourcesRow) and row.buttons
    assert row.buttons[0].text().startswith("[1] harbour.txt · ")
    row.buttons[0].click()
    assert row.dialog is not None and "Tern Island" in row.dialog.highlighted()
    row.dialog.close()

    # Another chat has no document: nothing on its messages; back again, the extras are read again.
    w.controller.select(other)
    wait_for(qtbot, lambda: w.view.conversation_id == other)
    w.controller.select(cid)
    wait_for(qtbot, lambda: w.view.conversation_id == cid)
    wait_for(qtbot, lambda: "sources" in extras(w, "assistant") and "attachments" in extras(w, "user"), 60_000)
