"""Attaching a document to the chat on screen: a file dropped on the message box, or chosen
with the paperclip, is read, shown as a chip on the composer, and goes into THIS chat's prompt (its KV saved
with the chat); other chats do not see it; the chip's × removes it; a wrong file or an encrypted PDF without
its password is refused with a message in the toast, and nothing is attached."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QInputDialog, QPushButton
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import ChatSettings
from hisho.core.kv.session import conversation_owner
from hisho.gui.chat import attach as attach_mod
from hisho.gui.shell.main_window import MainWindow
from tests.fixtures.docs.make import make_encrypted_pdf
from tests.gui.conftest import message_ids, wait_for, wait_idle, wait_reply
from tests.gui.test_chat_window import open_chat, type_and_enter

SHORT = ChatSettings(temperature=0.0, max_tokens=8, repeat_penalty=1.0)
FERRY = "Harbour notes.\n\nThe ferry to Tern Island leaves at 7:15 every morning from pier 4.\n"


def drop_on_composer(qtbot: QtBot, w: MainWindow, *files: Path) -> None:
    """A real drag-enter and drop of ``files`` on the message box."""
    target = w.composer.edit.viewport()
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(f)) for f in files])
    pos = target.rect().center()
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    assert "Drop to attach" in w.composer.hint.text()
    drop = QDropEvent(QPointF(QPoint(pos)), Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    assert drop.isAccepted()


def attached_after(qtbot: QtBot, w: MainWindow, before: int) -> None:
    wait_for(qtbot, lambda: w.attach.attached_count > before, 120_000)
    wait_idle(qtbot, w, 120_000)


def test_a_file_dropped_on_the_message_box_is_attached_to_this_chat_only(
        qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    w = window
    other = open_chat(qtbot, w, SHORT, "Other chat")
    cid = open_chat(qtbot, w, SHORT, "Island trip")
    notes = tmp_path / "HARBOUR"          # no extension: read by content
    notes.write_text(FERRY, encoding="utf-8")
    before_tokens = w.ctx.chat.count(w.ctx.chat.prompt_messages(cid))

    drop_on_composer(qtbot, w, notes)
    assert w.composer.attachment_names() == ["Reading HARBOUR…"]
    attached_after(qtbot, w, 0)
    assert w.composer.attachment_names() == ["HARBOUR"]
    assert "Attached to this chat" in w.toast.text() and "read whole" in w.toast.text()
    assert w.composer.text() == ""                       # the path was not pasted into the box
    prompt = w.ctx.chat.prompt_messages(cid)
    assert prompt[0]["role"] == "system" and "Tern Island" in prompt[0]["content"]
    assert w.ctx.store.get(cid).system_prompt == ""      # the chat's own system prompt is not edited
    assert w.ctx.chat.count(prompt) > before_tokens + 15
    assert all("Tern Island" not in m["content"] for m in w.ctx.chat.prompt_messages(other))
    if w.ctx.kv is not None:                              # the document's prefix was prefilled and kept
        assert w.ctx.kv.usage(cid).n_tokens >= w.ctx.chat.count(prompt) - 8
        assert conversation_owner(cid)

    # The question's prompt holds the document: the reply's prompt is longer than the question alone.
    known = message_ids(w, cid)
    type_and_enter(qtbot, w, "When does the ferry leave?")
    wait_reply(qtbot, w, cid, known)
    reply = w.ctx.store.branch(cid)[-1]
    assert reply.role == "assistant" and (reply.prompt_tokens or 0) > w.ctx.chat.count(
        [{"role": "user", "content": "When does the ferry leave?"}]) + 15

    # Another chat shows no chip; back again, the chip is there.
    w.controller.select(other)
    wait_for(qtbot, lambda: w.composer.attachment_names() == [])
    w.controller.select(cid)
    wait_for(qtbot, lambda: w.composer.attachment_names() == ["HARBOUR"])

    # The chip's × takes it out of the next prompt.
    remove = [b for b in w.composer.chips.findChildren(QPushButton) if b.text() == "×"]
    assert len(remove) == 1
    qtbot.mouseClick(remove[0], Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: w.composer.attachment_names() == [])
    assert "removed from this chat" in w.toast.text()
    assert [m["role"] for m in w.ctx.chat.prompt_messages(cid)] == ["user", "assistant"]  # no document left


def test_the_paperclip_attaches_and_wrong_or_locked_files_are_refused_with_a_message(
        qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = window
    cid = open_chat(qtbot, w, SHORT, "Files")
    elf = tmp_path / "tool"
    elf.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    sheet = tmp_path / "budget.xlsx"
    sheet.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    locked = make_encrypted_pdf(tmp_path / "locked.pdf", "s3cret")
    good = tmp_path / "notes.md"
    good.write_text("# Notes\n\nBuy stamps.\n", encoding="utf-8")
    chosen = [str(elf), str(sheet), str(locked)]
    monkeypatch.setattr(attach_mod.QFileDialog, "getOpenFileNames",
                        staticmethod(lambda *a, **k: (chosen, "")))

    prompts: list[str] = []

    def cancel_password() -> None:   # the password prompt appears; the user cancels it
        for top in QApplication.topLevelWidgets():
            if isinstance(top, QInputDialog) and top.isVisible():
                prompts.append(top.labelText())
                top.reject()
                return
        QTimer.singleShot(50, cancel_password)

    QTimer.singleShot(50, cancel_password)
    qtbot.mouseClick(w.composer.attach_button, Qt.MouseButton.LeftButton)
    attached_after(qtbot, w, 0)
    said = w.toast.text()
    assert said.startswith("Not attached:"), said
    assert "tool: " in said and "budget.xlsx: unsupported file type '.xlsx'" in said
    assert "locked.pdf: the PDF is encrypted and no password was given" in said
    assert prompts and "locked.pdf is encrypted" in prompts[0]
    assert w.composer.attachment_names() == []
    assert w.ctx.documents.chat_documents().attached(cid) == []

    chosen[:] = [str(good)]
    qtbot.mouseClick(w.composer.attach_button, Qt.MouseButton.LeftButton)
    attached_after(qtbot, w, 1)
    assert w.composer.attachment_names() == ["notes.md"]
    assert "Buy stamps" in w.ctx.chat.prompt_messages(cid)[0]["content"]
