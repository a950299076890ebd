"""A document being attached says how far its reading is and can be stopped: "Reading long.pdf · 37 %" on its
chip, counting its pages, with a Stop that leaves it unattached (and the chat as it was); a file read to the end
is attached as before."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from hisho.core.documents import binary
from hisho.gui.shell.main_window import MainWindow
from tests.fixtures.docs.make import make_pdf
from tests.gui.conftest import wait_for, wait_idle
from tests.gui.test_chat_window import open_chat

READING = re.compile(r"Reading long\.pdf · (\d+) %")


def chip_stop(w: MainWindow) -> QPushButton | None:
    return next((b for b in w.composer.chips.findChildren(QPushButton) if b.text() == "Stop" and b.isVisible()),
                None)


def test_reading_a_document_shows_its_progress_and_stop_leaves_it_out(
        qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = window
    pages = [f"Page {i} of the long report.\n" + f"Budget line item number {i}. " * 20 for i in range(1, 121)]
    pdf = make_pdf(tmp_path / "long.pdf", pages)
    page_text = binary._page_text
    allowed, asks, go = threading.Semaphore(0), threading.Event(), threading.Event()

    def held_page(doc: object, index: int) -> tuple[str, bool]:
        # Each page waits for the test to let it go (one a look at the chip), so the reading is still under
        # way when Stop is clicked, on a fast machine and on a loaded one alike.
        asks.set()
        while not go.is_set() and not allowed.acquire(timeout=0.02):
            pass
        return page_text(doc, index)

    monkeypatch.setattr(binary, "_page_text", held_page)
    cid = open_chat(qtbot, w, title="Reading")
    try:
        w.attach.attach([pdf])
        seen: list[int] = []

        def reading() -> bool:
            if asks.is_set():         # one more page each look (the window shows progress at most every 0.2 s)
                asks.clear()
                allowed.release()
            names = w.composer.attachment_names()
            m = READING.fullmatch(names[0]) if names else None
            if m:
                seen.append(int(m.group(1)))
            return bool(m) and int(m.group(1)) >= 10

        wait_for(qtbot, reading, 60_000)
        wait_for(qtbot, lambda: chip_stop(w) is not None)
        stop = chip_stop(w)
        at = seen[-1]
        wait_for(qtbot, lambda: reading() and seen[-1] > at, 30_000)
        assert chip_stop(w) is stop   # the same chip and Stop while its percentage moves (a click is not lost)
        stop.click()
    finally:
        go.set()
    wait_for(qtbot, lambda: w.attach.attached_count >= 1, 60_000)
    wait_idle(qtbot, w)
    assert w.composer.attachment_names() == []
    assert w.ctx.documents.chat_documents().attached(cid) == []
    assert "Stopped reading long.pdf" in w.toast.text(), w.toast.text()
    assert max(seen) < 99 and sorted(seen) == seen

    monkeypatch.setattr(binary, "_page_text", page_text)  # read to its end: attached as before, no Stop left
    w.attach.attach([pdf])
    wait_for(qtbot, lambda: w.attach.attached_count >= 2, 120_000)
    wait_idle(qtbot, w)
    assert w.composer.attachment_names() == ["long.pdf"] and chip_stop(w) is None
