"""Quitting never waits on work in flight: closing the window while a model loads (held mid-file, whatever the
machine's speed) stops the load and ends the engine within a few seconds; the drafts the store holds stay."""

from __future__ import annotations

import time

from pytestqt.qtbot import QtBot

from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.gui.shell.main_window import MainWindow
from tests.faults import LoadFreeze
from tests.gui.conftest import make_window, wait_for


def test_quit_during_a_model_load_ends_within_seconds(qtbot: QtBot) -> None:
    w: MainWindow = make_window(qtbot)
    engine = w.ctx.engine
    assert isinstance(engine, EngineClient)
    conv = w.ctx.store.create("Keep my draft")
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    w.composer.set_text("a draft typed while the model loads")
    big = model_file("llama-3.2-1b", "Q4_0")
    with LoadFreeze(engine) as held:
        w.controller.switch_model(str(big), override=True)
        wait_for(qtbot, held.frozen.is_set, 120_000)
        held.thaw()  # the load goes on (slowly, on a loaded machine): the quit must not wait for it
        started = time.monotonic()
        w.close()
        took = time.monotonic() - started
    assert took < 5.0, f"closing took {took:.1f} s"
    assert not engine.running
    assert w.ctx.store.get(conv.id).draft == "a draft typed while the model loads"
