"""Documents in the window: drop highlight, drop → progress → the summary opens as a conversation, cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from hisho.gui.documents import DocumentsController
from hisho.gui.main_window import MainWindow
from tests.gui.conftest import wait_for


def controller(window: MainWindow) -> DocumentsController:
    existing = getattr(window, "documents", None)
    return existing if isinstance(existing, DocumentsController) else DocumentsController(window)


def mime(*paths: Path) -> QMimeData:
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return data


@pytest.mark.filterwarnings("ignore:Function.*QDragEnterEvent:DeprecationWarning")
def test_drop_highlights_then_summary_opens_as_conversation(qtbot: QtBot, window: MainWindow,
                                                            tmp_path: Path) -> None:
    docs = controller(window)
    note = tmp_path / "plan.md"
    note.write_text("# Plan\nThe team ships the app in May.\n\n# Risks\nThe printer in room 4 is broken.\n")
    data = mime(note, tmp_path / "missing.pdf")
    enter = QDragEnterEvent(window.rect().center(), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted() and docs.overlay.isVisible()
    drop = QDropEvent(QPointF(window.rect().center()), Qt.DropAction.CopyAction, data, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, drop)
    assert not docs.overlay.isVisible()
    assert docs.panel.isVisible() and docs.running
    wait_for(qtbot, lambda: not docs.running, timeout=300_000)
    assert docs.last_result is not None and not docs.last_result.cancelled
    assert docs.last_result.skipped == ["missing.pdf: no such file (" + str(tmp_path / "missing.pdf") + ")"]
    cid = docs.last_conversation
    assert cid is not None and not docs.panel.isVisible()
    conv = window.ctx.store.get(cid)
    assert conv.title == "Summary: plan.md" and "printer in room 4" in conv.system_prompt
    branch = window.ctx.store.branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"] and branch[1].content == docs.last_result.summary
    assert "Not included:\n- missing.pdf: no such file" in branch[1].content
    assert "Summary ready" in window.statusBar().currentMessage()


def test_cancel_stops_the_job_and_keeps_the_window_usable(qtbot: QtBot, window: MainWindow,
                                                          tmp_path: Path) -> None:
    docs = controller(window)
    text = tmp_path / "long.txt"
    text.write_text("\n\n".join(f"Paragraph {i}: the harbour ferry leaves at {i % 12 + 1} o'clock. " * 6
                                 for i in range(300)))
    docs.summarize([text])
    wait_for(qtbot, lambda: docs.panel.stage.text().startswith(("Summarizing", "Planning")), timeout=120_000)
    qtbot.mouseClick(docs.panel.cancel, Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: not docs.running, timeout=120_000)
    assert docs.last_result is not None and docs.last_result.cancelled
    assert "Summary cancelled" in window.statusBar().currentMessage()
    assert docs.action.isEnabled() and not docs.panel.isVisible()
