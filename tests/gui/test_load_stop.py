"""A model load can be stopped: the status bar's Stop beside "Loading X… 12 %" aborts a real load (a true-shape
1B file, held mid-file so that the click lands during the load on any machine), the model that answered before answers again, and the window says so."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.gui.shell.main_window import MainWindow
from tests.faults import LoadFreeze
from tests.gui.conftest import settle, wait_for, wait_idle


def test_stop_aborts_a_load_and_the_previous_model_answers_again(qtbot: QtBot, window: MainWindow,
                                                                default_model_path: Path) -> None:
    w = window

    def demo(path: str) -> bool:
        return Path(path).resolve() == default_model_path.resolve()

    big = model_file("llama-3.2-1b", "Q4_0")
    before = w.ctx.engine.load_params
    assert before is not None and demo(before.model_path)
    stop = w.status.stop_load
    assert stop.isHidden()                                  # no load, no Stop
    engine = w.ctx.engine
    assert isinstance(engine, EngineClient)
    with LoadFreeze(engine) as held:                        # the load stays mid-file until Stop was clicked
        w.controller.switch_model(str(big), override=True)
        wait_for(qtbot, lambda: not stop.isHidden())
        wait_for(qtbot, held.frozen.is_set, 120_000)
        settle(qtbot, 0.6)                                  # the tick shows the load's own progress
        assert "Loading" in w.status.model.text() and "%" in w.status.model.text()
        stop.click()
    wait_for(qtbot, lambda: w.controller.model_ready, 120_000)
    wait_idle(qtbot, w)
    after = w.ctx.engine.load_params
    assert after is not None and demo(after.model_path)   # the demo answers again
    assert w.ctx.load_params is not None and demo(w.ctx.load_params.model_path)
    assert "stopped" in w.toast.text() and "answers again" in w.toast.text(), w.toast.text()
    assert "Loading" not in w.status.model.text() and stop.isHidden()
    assert not w.banner.isVisible()
    assert w.ctx.engine.count_tokens("still answering") > 0  # the engine has a model: no re-load of the big one
    assert w.ctx.engine.load_params is not None and demo(w.ctx.engine.load_params.model_path)
