"""Settings → API in the real window on the real model: off by default; on, the window's own engine answers
OpenAI clients (also while a chat is being answered), the status bar says when API requests run; off again,
nothing listens."""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpx
import openai
import pytest
from pytestqt.qtbot import QtBot

from hisho.api import keys
from hisho.core.conversations.store import ChatSettings
from hisho.gui.settings.api_page import ApiPage, serving, stop_api
from hisho.gui.settings.preferences import PreferencesDialog
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_page(w: MainWindow) -> ApiPage:
    next(a for a in w.file_menu.actions() if a.text() == "Settings…").trigger()
    dialog = w._preferences  # type: ignore[attr-defined]
    assert isinstance(dialog, PreferencesDialog)
    page = next(dialog.pages.widget(i) for i in range(dialog.pages.count())
                if isinstance(dialog.pages.widget(i), ApiPage))
    dialog.nav.setCurrentRow(dialog.pages.indexOf(page))
    assert isinstance(page, ApiPage)
    return page


def test_api_switch_serves_the_window_engine(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    page = open_page(w)
    assert not page.enabled.isChecked() and page.status.text() == "Off."
    port = free_port()
    page.port.setValue(port)
    page.enabled.setChecked(True)
    try:
        assert w.ctx.settings["api_enabled"] and w.ctx.settings["api_port"] == port
        assert page.key.text() == keys.api_key() and f"127.0.0.1:{port}" in page.status.text()
        # The limits are settings; a change restarts the server with them (docs/api.md, "Limits").
        assert set(page.limits) == {"api_max_body_mb", "api_max_prompt_tokens", "api_request_timeout_s",
                                    "api_max_queued", "api_max_wait_s"}
        page.limits["api_max_queued"].setValue(3)
        page.limits["api_max_queued"].editingFinished.emit()
        assert w.ctx.settings["api_max_queued"] == 3
        server = serving(w)
        assert server is not None and server.backend.limits.max_queued == 3
        page.limits["api_max_wait_s"].setValue(900)  # generous: the request below may wait for the window's reply
        page.limits["api_max_wait_s"].editingFinished.emit()
        server = serving(w)
        assert server is not None and server.backend.waits.max_wait_s == 900
        model = w.ctx.model_path.stem if w.ctx.model_path else ""
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=page.key.text(), max_retries=0,
                               timeout=300)
        # A request sent while the window is answering a chat: both finish, neither is lost.
        conv = w.ctx.store.create("Both", settings=ChatSettings(max_tokens=24, temperature=0.0))
        w.controller.refresh(conv.id)
        w.controller.select(conv.id)
        wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
        w.controller.send("Say hello.")
        got: dict[str, Any] = {}

        def ask() -> None:
            got["r"] = client.completions.create(model=model, prompt="Count: 1, 2, 3, 4,", max_tokens=300,
                                                 temperature=0)

        t = threading.Thread(target=ask)
        t.start()
        queue = w.status.queue
        wait_for(qtbot, lambda: queue.isVisible() and queue.text().startswith("API"))
        # Running, or waiting while the window's reply runs (as /health says): never both, never neither.
        assert queue.text() in ("API: 1 request running", "API: 1 request waiting")
        wait_idle(qtbot, w)
        wait_for(qtbot, lambda: not t.is_alive(), timeout=300_000)
        assert got["r"].usage.completion_tokens > 0
        # Connect a client: the base addresses and the snippets name this server, its key and its model.
        connect = page.connect_tab
        assert [b.text() for b in connect.bases] == [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}"]
        connect.client.setCurrentIndex(connect.client.findText("Claude Code"))
        assert f"ANTHROPIC_BASE_URL=http://127.0.0.1:{port}\n" in connect.snippet.toPlainText()
        assert page.key.text() in connect.snippet.toPlainText()
        # Requests: each one the engine ran, its wire format, and how much of its prompt came from the cache.
        system = "You are a careful assistant who answers in one short sentence. " * 30
        for _ in range(2):
            client.chat.completions.create(model=model, max_tokens=4, temperature=0, messages=[
                {"role": "system", "content": system}, {"role": "user", "content": "Hi"}])
        page.tabs.setCurrentWidget(page.requests_tab)
        table = page.requests_tab.table
        rows = [table.topLevelItem(i) for i in range(table.topLevelItemCount())]
        assert [r.text(1) for r in rows[:3]] == ["chat completions", "chat completions", "completions"]
        prompt, cached = (int(rows[0].text(c).split()[0].replace(",", "")) for c in (2, 3))
        assert 0 < cached <= prompt   # the second request's system prompt came from the cache, not read again
        assert "came from the cache" in page.requests_tab.summary.text()
        assert [m.role for m in w.ctx.store.messages(conv.id)][-2:] == ["user", "assistant"]
        wait_for(qtbot, lambda: not queue.isVisible())
        # A new key: the old one is refused from now on.
        old = page.key.text()
        page.regenerate()
        assert page.key.text() != old
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
        page.enabled.setChecked(False)
        assert page.status.text() == "Off." and not w.ctx.settings["api_enabled"]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        stop_api(w)
