"""The status bar says what the engine works on and what waits for it, from the app's one state: a change of
``Now.queue`` made on another thread (as the engine lane and the API's threads make it) shows on the GUI thread
as one short label, and the label hides when nothing runs or waits."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pytestqt.qtbot import QtBot

from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for


def _on_a_worker(fn: Callable[[], None]) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join(10)


def test_the_status_bar_shows_the_engine_s_queue_and_hides_when_idle(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    label = w.status.queue
    wait_for(qtbot, lambda: not label.isVisible())   # the start-up load has left the queue
    held, leave = threading.Event(), threading.Event()

    def summary() -> None:
        with w.ctx.state.working("summarizing report.pdf"):
            held.set()
            leave.wait(30)

    worker = threading.Thread(target=summary)
    worker.start()
    try:
        assert held.wait(10)
        wait_for(qtbot, lambda: label.isVisible() and label.text() == "summarizing report.pdf")
        _on_a_worker(lambda: w.ctx.state.api_queue(0, 2))
        wait_for(qtbot, lambda: label.text() == "summarizing report.pdf · API: 2 requests waiting")
        assert w.model_label.text() == w.ctx.state.now.model.display   # the model shown is unchanged
    finally:
        leave.set()
        worker.join(10)
    wait_for(qtbot, lambda: label.text() == "API: 2 requests waiting")
    _on_a_worker(lambda: w.ctx.state.api_queue(1, 0))
    wait_for(qtbot, lambda: label.text() == "API: 1 request running")
    _on_a_worker(lambda: w.ctx.state.api_queue(0, 0))
    wait_for(qtbot, lambda: not label.isVisible(), 10_000)
