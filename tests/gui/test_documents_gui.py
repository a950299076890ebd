"""Documents in the window: drop highlight, drop → progress → the summary opens as a conversation, cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from hisho.gui.chat.documents import DocumentsController
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import make_window, wait_for, wait_idle


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
    photo = tmp_path / "photo.txt"  # several files at once, one bad: a binary file renamed .txt
    photo.write_bytes(bytes.fromhex("89504E470D0A1A0A0000000D49484452") + bytes(range(256)) * 8)
    data = mime(note, photo)
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
    bad = "photo.txt: this looks like a binary file, not text (no character set decodes it)"
    assert docs.last_result.skipped == [bad]
    cid = docs.last_conversation
    assert cid is not None and not docs.panel.isVisible()
    conv = window.ctx.store.get(cid)
    assert conv.title == "Summary: plan.md" and "printer in room 4" in conv.system_prompt
    branch = window.ctx.store.branch(cid)
    assert [m.role for m in branch] == ["user", "assistant"] and branch[1].content == docs.last_result.summary
    assert f"Not included:\n- {bad} — not summarized" in branch[1].content  # the good file is summarized
    toast = window.toast.text()
    assert toast.startswith("Summary ready") and f"Skipped: {bad}" in toast  # the bad one is reported


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
    assert "Summary cancelled" in window.toast.text()
    assert docs.action.isEnabled() and not docs.panel.isVisible()


def test_document_kv_survives_a_restart_so_a_question_prefills_only_itself(qtbot: QtBot, window: MainWindow,
                                                                           tmp_path: Path) -> None:
    """Asking about a document: a document that fits is prefilled once; after closing the app and opening it
    again, the first question restores that KV from disk and the engine reads only the question."""
    from hisho.core.conversations.store import ChatSettings
    from hisho.core.documents.ask import load_attachment

    docs = controller(window)
    note = tmp_path / "minutes.md"
    note.write_text("# Budget\nThe council approved 4,000 dollars for the bridge.\n\n# Library\n"
                    "The library opens at nine on Saturdays from June.\n")
    docs.summarize([note])
    wait_for(qtbot, lambda: not docs.running, timeout=300_000)
    cid = docs.last_conversation
    assert cid is not None
    att = load_attachment(window.ctx.store.db, cid)
    assert att is not None and att.approach == "whole"
    assert "Whole document in context" in window.toast.text()  # the UI says which approach
    window.ctx.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=8))
    window.close()  # closes the KV session first: the document's saved prefix is on disk and indexed

    w2 = make_window(qtbot)
    try:
        wait_for(qtbot, lambda: w2.controller.current is not None and w2.controller.current.id == cid)
        kv = w2.ctx.kv
        engine = w2.ctx.engine
        prefix = w2.ctx.chat.prompt_messages(cid)
        n_prefix = len(engine.tokenize(messages=prefix, add_generation_prompt=False))
        question = "When does the library open?"
        n_prompt = w2.ctx.chat.count([*prefix, {"role": "user", "content": question}])
        w2.controller.send(question)
        wait_idle(qtbot, w2)
        reply = w2.ctx.store.branch(cid)[-1]
        assert reply.role == "assistant" and reply.status == "done" and reply.prompt_tokens == n_prompt
        report = kv.last_restore
        assert report is not None and report.failed == 0
        # The engine process is new: all it holds of the prompt was restored from the saved document KV ...
        assert report.restored == n_prefix > 100
        # ... so what it had to read for this question is the question (and its chat-template wrapping) alone.
        assert reply.prompt_tokens - report.restored == n_prompt - n_prefix < 30
    finally:
        w2.close()


def test_only_bad_files_dropped_each_get_their_message(qtbot: QtBot, window: MainWindow, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures.docs.make import make_encrypted_pdf, make_image_pdf

    # The encrypted PDF asks for its password; the user cancels the prompt.
    monkeypatch.setattr("hisho.gui.chat.documents.QInputDialog.getText", lambda *a, **k: ("", False))
    docs = controller(window)
    files = [make_encrypted_pdf(tmp_path / "locked.pdf", "pw"), make_image_pdf(tmp_path / "scan.pdf", 2),
             tmp_path / "empty.txt", tmp_path / "sheet.xlsx"]
    files[2].write_bytes(b"")
    files[3].write_bytes(b"PK")
    docs.summarize(files)
    wait_for(qtbot, lambda: not docs.running, timeout=120_000)
    toast = window.toast.text()
    assert "locked.pdf: the PDF is encrypted and no password was given" in toast
    assert "scan.pdf: the PDF has no text layer (2 pages of images, e.g. a scan); run OCR on it first" in toast
    assert "empty.txt: the file is empty (0 bytes)" in toast and "sheet.xlsx: unsupported file type" in toast
    assert docs.action.isEnabled() and not docs.panel.isVisible() and docs.last_conversation is None


def test_encrypted_pdf_asks_for_its_password_until_it_opens(qtbot: QtBot, window: MainWindow, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures.docs.make import make_encrypted_pdf

    prompts: list[str] = []
    answers = iter([("guess", True), ("s3cret", True)])

    def get_text(parent: object, title: str, label: str, *rest: object) -> tuple[str, bool]:
        assert QApplication.instance() is not None and title == "Encrypted PDF"
        prompts.append(label)
        return next(answers)

    monkeypatch.setattr("hisho.gui.chat.documents.QInputDialog.getText", get_text)
    docs = controller(window)
    docs.summarize([make_encrypted_pdf(tmp_path / "locked.pdf", "s3cret", "Quarterly figures rose by nine")])
    wait_for(qtbot, lambda: not docs.running, timeout=300_000)
    assert prompts == ["locked.pdf is encrypted. Enter its password to summarize it:",
                       "The password for locked.pdf did not open it. Try again:"]
    assert docs.last_result is not None and docs.last_result.skipped == []
    cid = docs.last_conversation
    assert cid is not None and "Quarterly figures rose by nine" in window.ctx.store.get(cid).system_prompt


def test_500_page_pdf_shows_page_progress_and_the_window_stays_responsive(qtbot: QtBot, window: MainWindow,
                                                                          tmp_path: Path) -> None:
    import time

    from PySide6.QtCore import QTimer

    from tests.fixtures.docs.make import make_pdf

    docs = controller(window)
    pdf = make_pdf(tmp_path / "long.pdf", [f"Page {i}: budget line {i} for the harbour works." for i in range(500)])
    stages: list[tuple[str, int, int]] = []
    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:  # the GUI thread's heartbeat: a long gap would be a frozen window
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now
        stages.append((docs.panel.stage.text(), docs.panel.bar.value(), docs.panel.bar.maximum()))

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(20)
    docs.summarize([pdf])
    wait_for(qtbot, lambda: docs.panel.stage.text().startswith(("Planning", "Summarizing")) or not docs.running,
             timeout=300_000)
    timer.stop()
    docs.cancel()
    wait_for(qtbot, lambda: not docs.running, timeout=120_000)
    pages = [(v, m) for text, v, m in stages if "reading long.pdf: page" in text]
    assert pages, "page progress was never shown"
    assert all(m == 1000 and 0 <= v <= 50 for v, m in pages)  # extraction: the bar's first 5 % (one bar)
    assert [v for v, _ in pages] == sorted(v for v, _ in pages)  # it only moves forward
    assert any(text.endswith("page 500 of 500") for text, _, _ in stages) or pages[-1][0] > 40
    print(f"\n500-page PDF: {len(pages)} page-progress frames seen, longest GUI gap {max(gaps) * 1000:.0f} ms")
    assert max(gaps) < 1.0, f"the window froze for {max(gaps):.2f}s"
