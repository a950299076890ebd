"""The remote engine in the real window (a loopback OpenAI-compatible server, tests/remote_stub.py):

- the engine picked in the chat header survives a restart: a window started after a remote model was chosen
  connects to it (no local model is loaded); a server that is down at start-up falls back to the local model
  in one line; picking another model (remote or local) is what the next start uses;
- the memory planner says "runs on <engine>" for a remote model instead of pricing it against this computer;
- the Models page's Hub tab offers "Run on <engine>" for a file too big here;
- a send that waits on a slow remote engine says so, naming it (status bar, the reply, the queued message).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from hisho.core.hub import Fit, QuantFile
from hisho.core.remote import endpoints
from hisho.core.remote import engine as remote_engine
from hisho.core.remote.http import Endpoint
from hisho.gui.models.models_page import open_models
from hisho.gui.models.planner_panel import open_planner
from hisho.gui.shell.app import open_window
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import QT_NOISE, wait_for, wait_idle
from tests.remote_peers import free_port
from tests.remote_stub import MODEL, StubServer

BIG = "/models/Big-70B-Instruct-Q4_K_M.gguf"     # how llama-server names a model started with --model <path>


def start(qtbot: QtBot) -> MainWindow:
    w = open_window(None)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    with StubServer("ok", models=(MODEL, BIG)) as srv:
        endpoints.save_endpoints([Endpoint("box", srv.url)])
        yield srv


@pytest.fixture
def on_box(qtbot: QtBot, stub: StubServer, default_model_path: object) -> Iterator[MainWindow]:
    """A window started after "box"'s model was chosen last time."""
    endpoints.save_choice("box", MODEL)
    w = start(qtbot)
    wait_for(qtbot, lambda: w.controller.model_ready, 60_000)
    yield w
    w.close()


def chat(qtbot: QtBot, w: MainWindow, title: str) -> int:
    conv = w.ctx.store.create(title)
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    return conv.id


def test_remote_choice_is_restored_at_start(qtbot: QtBot, on_box: MainWindow, stub: StubServer) -> None:
    w = on_box
    assert w.ctx.engine.engine_info.get("engine") == "box" and w.ctx.engine.load_params is not None
    assert w.ctx.engine.load_params.model_path == MODEL
    assert w.ctx.local_engine is not None and w.ctx.local_engine.load_params is None  # nothing loaded here
    assert "box" in w.model_label.text() and "box" in w.status.model.text()

    cid = chat(qtbot, w, "Remote after restart")
    w.controller.send("Hello?")
    wait_idle(qtbot, w, 60_000)
    reply = w.ctx.store.branch(cid)[-1]
    assert (reply.engine, reply.model, reply.content) == ("box", MODEL, "Hello from the stub.")
    assert w.status.device.text() == "box · 32 of 40 cached"      # the server's prefix-cache hit, shown

    picker = w.model_picker  # type: ignore[attr-defined]
    picker.choose_remote(Endpoint("box", stub.url), BIG)          # another remote model: remembered
    wait_for(qtbot, lambda: endpoints.load_choice() == ("box", BIG), 60_000)
    wait_idle(qtbot, w, 60_000)
    picker.refresh()
    wait_for(qtbot, lambda: bool(picker.entries), 60_000)
    picker.choose(picker.entries[0])                              # a local model: the next start is local
    wait_for(qtbot, lambda: endpoints.load_choice() == (endpoints.LOCAL, ""), 60_000)


def test_unreachable_choice_falls_back_to_local(qtbot: QtBot, default_model_path: object,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    endpoints.save_endpoints([Endpoint("gone", f"http://127.0.0.1:{free_port()}")])
    endpoints.save_choice("gone", MODEL)
    w = start(qtbot)
    try:
        wait_for(qtbot, lambda: "gone" in w.toast.text(), 60_000)            # said in one line…
        assert "this computer" in w.toast.text()
        wait_for(qtbot, lambda: w.controller.model_ready, 600_000)          # …and the local model loads
        assert w.ctx.engine is w.ctx.local_engine and w.ctx.engine.load_params is not None
        assert endpoints.load_choice() == ("gone", MODEL)                   # tried again next time
    finally:
        w.close()


def test_planner_says_where_a_remote_model_runs(qtbot: QtBot, on_box: MainWindow) -> None:
    panel = open_planner(on_box)
    qtbot.addWidget(panel)
    assert "runs on" in panel.choice.text() and "box" in panel.choice.text() and MODEL in panel.choice.text()
    assert panel.bar.isHidden() and panel.slider.isHidden()        # nothing priced against this laptop's RAM
    assert "RAM is not planned" in panel.reason.text() and "your setting" in panel.ctx_label.text()
    wait_idle(qtbot, on_box)
    assert panel.plan is None and "GiB" not in panel.ctx_label.text()
    panel.close()


def _fits() -> list[Fit]:
    def qf(name: str, quant: str, size: int) -> QuantFile:
        return QuantFile("org/Big-70B-Instruct-GGUF", name, quant, size, [name], [""])

    return [Fit(qf("Big-70B-Instruct-Q4_K_M.gguf", "Q4_K_M", 40 << 30), "wont_fit", "needs 41 GiB; 8 available"),
            Fit(qf("Big-70B-Instruct-Q2_K.gguf", "Q2_K", 26 << 30), "wont_fit", "needs 27 GiB; 8 available"),
            Fit(qf("Big-70B-Instruct-IQ1_S.gguf", "IQ1_S", 1 << 30), "fits", "fits")]


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")   # the page's own window
def test_hub_offers_a_remote_engine_for_a_model_too_big_here(qtbot: QtBot, on_box: MainWindow) -> None:
    w = on_box
    page = open_models(w, "Hub")
    hub = page.hub
    wait_for(qtbot, lambda: hub.remote_names == ["box"], 30_000)
    fits = _fits()
    hub._show_files([f.file for f in fits])
    hub._planned(hub._seq, fits)
    buttons = [hub.files.cellWidget(row, 5).text() for row in range(3)]    # type: ignore[union-attr]
    assert buttons == ["Run on box", "Run on box", "Download"]

    hub.files.cellWidget(0, 5).click()            # box serves that file already: chat with it there
    wait_for(qtbot, lambda: endpoints.load_choice() == ("box", BIG), 30_000)
    wait_idle(qtbot, w, 30_000)
    assert w.ctx.engine.load_params is not None and w.ctx.engine.load_params.model_path == BIG

    hub.files.cellWidget(1, 5).click()            # not served there: the command that starts it on box
    wait_for(qtbot, lambda: getattr(w, "_remote_help", None) is not None, 30_000)
    box = w._remote_help  # type: ignore[attr-defined]
    assert "box does not serve Big-70B-Instruct-Q2_K.gguf" in box.text()
    assert box.informativeText().startswith("llama-server -hf org/Big-70B-Instruct-GGUF:Q2_K ")
    box.close()
    page.close()


def test_a_send_waiting_on_a_slow_remote_engine_names_it(qtbot: QtBot, on_box: MainWindow, stub: StubServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    w = on_box
    monkeypatch.setattr(remote_engine, "WAIT_NOTICE_S", 0.3)
    stub.mode, stub.delay_s = "slow", 4.0
    chat(qtbot, w, "Slow server")
    w.controller.send("Hello?")
    w.controller.send("And then?")                                   # queued behind the first
    wait_for(qtbot, lambda: "box" in w.status.currentMessage(), 30_000)
    assert w.status.currentMessage() == "Waiting for box to start the reply above…"
    queued = [q.meta.text() for q in w.view.queued.values()]
    assert queued == ["Waiting for box to start the reply above · sent when it finishes"], queued
    assert w.view.stream_widget is not None and w.view.stream_widget.meta.text() == "waiting for box…"
    stub.mode = "ok"
    wait_idle(qtbot, w, 60_000)
    assert w.status.currentMessage() == "" and w.controller.sending.remote_wait == ""
