"""A send in the real window is one job on the engine lane (prompt, fit, record, KV restore, reply); the GUI
thread is asked only when the prompt does not fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import ChatSettings
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle


def test_a_send_is_one_engine_job(qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    w, c = window, window.controller
    wait_for(qtbot, lambda: c.model_ready, 300_000)
    conv = w.ctx.store.create("One job", settings=ChatSettings(max_tokens=4, temperature=0.0))
    c.refresh(conv.id)
    c.select(conv.id)
    wait_for(qtbot, lambda: c.current is not None and c.current.id == conv.id)
    wait_idle(qtbot, w)

    sending: list[str] = []
    real = w.ctx.executor.submit

    def counting(lane: str, fn: Callable[[], Any], **kw: Any) -> Any:
        name = getattr(fn, "__qualname__", "")
        if lane == "engine" and name.startswith("Sending."):     # jobs of the send path, not the meter's
            sending.append(name)
        return real(lane, fn, **kw)

    monkeypatch.setattr(w.ctx.executor, "submit", counting)
    c.send("Hello there.")
    wait_for(qtbot, lambda: len(w.ctx.store.branch(conv.id)) == 2, 300_000)
    wait_idle(qtbot, w)
    assert len(sending) == 1, sending
    reply = w.ctx.store.branch(conv.id)[-1]
    assert reply.role == "assistant" and reply.status == "done"
    assert c.last_fit is not None and c.last_fit.prompt_tokens > 0   # the meter got the send's own count
