"""Settings → Performance in the real window on the real model: the threads setting is saved for the next load,
the page says what automatic chose for the last reply and why, and the status bar's speed says when the engine
ran on fewer cores than it could."""

from __future__ import annotations

import re

from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.conversations.store import ChatSettings
from hisho.gui.settings.performance_page import PerformancePage, describe, status_suffix
from hisho.gui.settings.preferences import PreferencesDialog
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle

REDUCED = {"decode": {"kind": "decode", "threads": 1, "max": 2, "automatic": True, "changes": 1,
                      "why": "other programs are using the CPU (a decode step cost 480.0 ms per token at 2 threads, "
                             "14.0 ms expected at 1)"}}


def open_page(w: MainWindow) -> PerformancePage:
    next(a for a in w.file_menu.actions() if a.text() == "Settings…").trigger()
    dialog = w._preferences  # type: ignore[attr-defined]
    assert isinstance(dialog, PreferencesDialog) and dialog.isVisible()
    dialog.nav.setCurrentRow(dialog.pages.indexOf(dialog.performance_page))
    return dialog.performance_page


def test_lines_say_what_automatic_chose() -> None:
    assert describe(REDUCED, 0).startswith("Automatic chose 1 of 2 threads for the last reply: other programs")
    assert describe(REDUCED, 2) == "Replies use 2 threads, as set here."
    assert "no reply yet" in describe({}, 0)
    assert status_suffix(REDUCED) == " · 1/2 threads (CPU busy)"
    full = {"decode": {**REDUCED["decode"], "threads": 2}}
    assert status_suffix(full) == "" and status_suffix({}) == ""


def test_threads_setting_and_what_automatic_chose(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    conv = w.ctx.store.create("Speed", settings=ChatSettings(max_tokens=8, temperature=0.0))
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    w.controller.send("Say hello.")
    wait_idle(qtbot, w)
    decode = w.ctx.engine.threads["decode"]
    assert decode["automatic"] and 1 <= decode["threads"] <= decode["max"]
    speed = w.status.speed.text()
    assert re.fullmatch(r"\d+\.\d tok/s( · \d/\d threads \(CPU busy\))?", speed)
    assert f"of {decode['max']} CPU threads" in w.status.speed.toolTip()

    page = open_page(w)
    assert page.isVisible() and page.threads.currentData() == 0
    assert re.match(r"Automatic chose \d of \d+ threads for the last reply: .+\.$", page.chose.text())
    page.threads.setCurrentIndex(page.threads.findData(1))
    wait_for(qtbot, lambda: settings_mod.load()["n_threads"] == 1)
    assert page.chose.text() == "Replies use 1 thread, as set here."
    assert w.ctx.engine.load_params is not None and w.ctx.engine.load_params.n_threads == 0  # next load


def test_page_opens_while_a_remote_engine_answers(qtbot: QtBot) -> None:
    """A remote engine reports no thread choices of this computer: the page says automatic, it does not fail.
    The page needs only the services of the window (``HasContext``), so it is given just those."""
    from types import SimpleNamespace

    from hisho.core.remote.engine import RemoteEngine
    from hisho.core.remote.http import Endpoint

    engine = RemoteEngine(Endpoint("gpu-box", "http://127.0.0.1:9"))   # made, never asked: nothing is sent
    page = PerformancePage(SimpleNamespace(ctx=SimpleNamespace(settings=settings_mod.load(), engine=engine)))
    qtbot.addWidget(page)
    assert "no reply yet" in page.chose.text()
