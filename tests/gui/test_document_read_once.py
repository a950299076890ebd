"""A 30-page PDF dropped on the window is read once: the panel names the reading ("Reading page N of 30") with
tokens read of tokens total, the summary is written on the prefix the chat keeps, the first question reads only
itself; after quitting and starting again the reopened summary's question reads no document token (restored
from disk)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.conversations.store import ChatSettings
from hisho.gui.chat.documents import DocumentsController
from hisho.gui.shell.main_window import MainWindow
from tests.engine.test_document_reading import pages
from tests.fixtures.docs.make import make_pdf
from tests.gui.conftest import make_window, wait_for, wait_idle


def controller(window: MainWindow) -> DocumentsController:
    existing = getattr(window, "documents", None)
    return existing if isinstance(existing, DocumentsController) else DocumentsController(window)


def drop(window: MainWindow, path: Path) -> None:
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(path))])
    enter = QDragEnterEvent(window.rect().center(), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    event = QDropEvent(QPointF(window.rect().center()), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, event)
    assert event.isAccepted()


@pytest.mark.filterwarnings("ignore:Function.*QDragEnterEvent:DeprecationWarning")
def test_a_dropped_pdf_is_read_once_and_not_again_after_a_restart(qtbot: QtBot, tmp_path: Path,
                                                                 default_model_path: Path) -> None:
    s = settings_mod.load()
    s.set("n_ctx", 8192)   # the bundled model's trained context: a 30-page report fits with room for questions
    s.save()
    pdf = make_pdf(tmp_path / "report.pdf", pages())
    w = make_window(qtbot)
    try:
        docs = controller(w)
        shown: list[tuple[str, int, int]] = []
        show = docs.panel.show_progress

        def record(p: object) -> None:
            show(p)  # type: ignore[arg-type]
            shown.append((docs.panel.stage.text(), docs.panel.bar.value(), docs.panel.bar.maximum()))

        docs.panel.show_progress = record  # type: ignore[method-assign]
        drop(w, pdf)
        wait_for(qtbot, lambda: not docs.running, timeout=600_000)
        result = docs.last_result
        assert result is not None, (shown, w.toast.text())
        assert not result.cancelled and result.documents[0].mode == "whole"
        reading = [(text, v, m) for text, v, m in shown if text.startswith("Reading page ")]
        assert reading and " of 30 · " in reading[-1][0] and reading[-1][0].endswith(" tokens")
        assert all(v < m for _, v, m in reading)  # never 100 % while reading
        assert any(text.startswith("Writing the summary") for text, _, _ in shown)
        cid = docs.last_conversation
        assert cid is not None
        w.ctx.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=8))
        wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == cid)
        wait_idle(qtbot, w)
        w.controller.send("When does the harbour ferry leave?")
        wait_idle(qtbot, w)
        reply = w.ctx.store.branch(cid)[-1]
        assert reply.role == "assistant" and reply.prompt_tokens is not None, w.ctx.store.branch(cid)
        report = w.ctx.kv.last_restore if w.ctx.kv is not None else None
        assert reply.status == "done" and report is not None
        question_read = reply.prompt_tokens - report.restored
        assert question_read < 40
        assert result.tokens_read + question_read <= 1.05 * result.documents[0].input_tokens
        doc_tokens = result.documents[0].input_tokens
    finally:
        w.close()

    w2 = make_window(qtbot)
    try:
        wait_for(qtbot, lambda: w2.controller.current is not None and w2.controller.current.id == cid)
        w2.controller.send("How many books did the library of district 17 lend?")
        wait_idle(qtbot, w2)
        reply = w2.ctx.store.branch(cid)[-1]
        report = w2.ctx.kv.last_restore if w2.ctx.kv is not None else None
        assert reply.status == "done" and report is not None and report.from_disk
        assert report.restored > doc_tokens   # the document, its summary turn and the first exchange, from disk
        assert reply.prompt_tokens - report.restored < 40
    finally:
        w2.close()
