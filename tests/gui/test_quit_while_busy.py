"""Quitting never waits on work in flight: closing the window while a model loads (held mid-file, whatever the
machine's speed) stops the load and ends the engine within a few seconds; the drafts the store holds stay. The
same during a reply and a summary, the engine held mid-way (stopped: it answers nothing), and the next launch
opens a window."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.bench.shapes import model_file
from hisho.core.conversations.schema import STOPPED, STOPPED_AT_CLOSE
from hisho.core.engine.client import EngineClient
from hisho.gui.chat.documents import DocumentsController
from hisho.gui.shell.main_window import MainWindow
from tests.faults import EngineFreeze, LoadFreeze
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


def _held_close(qtbot: QtBot, w: MainWindow, start: Callable[[], None], op: str | None) -> float:
    """Start the work, hold the engine mid-way (SIGSTOP: the worst case, an engine that answers nothing), close
    the window; the seconds the close took."""
    engine = w.ctx.engine
    assert isinstance(engine, EngineClient)
    with EngineFreeze(engine, op) as held:
        start()
        wait_for(qtbot, held.frozen.is_set, 120_000)
        started = time.monotonic()
        w.close()
        took = time.monotonic() - started
    assert not engine.running
    return took


def test_quit_during_a_reply_ends_within_seconds_and_the_next_launch_opens(qtbot: QtBot) -> None:
    w: MainWindow = make_window(qtbot)
    conv = w.ctx.store.create("Asked before quitting")
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    question = "Tell me about lighthouses. " + "The keeper logged every ship, the weather and the sea. " * 40
    took = _held_close(qtbot, w, lambda: w.controller.send(question), "generate")
    assert took < 5.0, f"closing during a reply took {took:.1f} s"
    again = make_window(qtbot)  # the next launch: a window, the message the store held still there
    try:
        assert again.isVisible()
        assert [m.content for m in again.ctx.store.branch(conv.id) if m.role == "user"] == [question]
        # The reply the quit ended is stopped when Hisho closed, not "Engine crashed".
        replies = [m for m in again.ctx.store.branch(conv.id) if m.role == "assistant"]
        assert [(m.status, m.error) for m in replies] == [(STOPPED, STOPPED_AT_CLOSE)]
    finally:
        again.close()


def test_quit_during_a_summary_ends_within_seconds(qtbot: QtBot, tmp_path: Path) -> None:
    w: MainWindow = make_window(qtbot)
    docs = getattr(w, "documents", None)
    assert isinstance(docs, DocumentsController)
    text = tmp_path / "long.txt"
    text.write_text("\n\n".join(f"Paragraph {i}: the harbour ferry leaves at {i % 12 + 1} o'clock. " * 6
                                 for i in range(300)))
    took = _held_close(qtbot, w, lambda: docs.summarize([text]), None)
    assert took < 5.0, f"closing during a summary took {took:.1f} s"
    again = make_window(qtbot)
    try:
        assert again.isVisible()
    finally:
        again.close()


def test_quit_during_the_first_start_measurement_ends_within_seconds(qtbot: QtBot,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh home measures this computer once the first model answers (a probe child, seconds of both cores);
    a quit meanwhile ends the child with the window, so no worker thread holds the process's exit."""
    from hisho.core import spawn

    monkeypatch.setenv("HISHO_MEASURE_AT_START", "1")
    w: MainWindow = make_window(qtbot)
    wait_for(qtbot, lambda: bool(spawn._RUNNING), 120_000)
    started = time.monotonic()
    w.close()
    took = time.monotonic() - started
    assert took < 5.0, f"closing during the measurement took {took:.1f} s"
    assert not spawn._RUNNING  # the child is gone, and the lane's shutdown within the close saw its job end
