"""Settings → Engines and the header picker in the real window: add a remote engine (a loopback server),
test its connection, pick its model, chat through it (the reply records the engine), and go back to local."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from hisho.core.remote import endpoints
from hisho.gui.settings.engines_page import EnginesPage
from hisho.gui.settings.preferences import PreferencesDialog
from hisho.gui.shell.app import open_window
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle
from tests.remote_stub import MODEL, StubServer

KEY = "sk-gui-test-key-98765"


def open_engines(w: MainWindow) -> EnginesPage:
    next(a for a in w.file_menu.actions() if a.text() == "Settings…").trigger()
    dialog = w._preferences  # type: ignore[attr-defined]
    assert isinstance(dialog, PreferencesDialog)
    row = next(i for i in range(dialog.nav.count()) if dialog.nav.item(i).text() == "Engines")
    dialog.nav.setCurrentRow(row)
    page = dialog.pages.widget(row)
    assert isinstance(page, EnginesPage)
    return page


@pytest.fixture
def slow_window(qtbot: QtBot, default_model_path: object) -> Iterator[MainWindow]:
    """The real window; the local model may take minutes to load on a shared machine (behaviour, not speed)."""
    w = open_window(None)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_ready, timeout=600_000)
    yield w
    w.close()


def test_add_test_pick_and_chat_remote(qtbot: QtBot, slow_window: MainWindow,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    w = slow_window
    with StubServer("ok") as srv:
        page = open_engines(w)
        assert page.list.item(0).text().startswith("Local — this computer")
        page.list.setCurrentRow(page.list.count() - 1)          # "+ Add a remote engine"
        page.name.setText("local")
        page.url.setText(srv.url)
        page.save_btn.click()
        assert "built-in engine" in page.result.text()         # the reserved name is refused, in one line
        page.name.setText("box")
        page.key.setText(KEY)
        page.save_btn.click()
        saved = endpoints.engines_file().read_text()
        assert "box" in saved and KEY not in saved             # the key is not in the list file
        key_file = endpoints._key_file("box")
        assert key_file.read_text() == KEY and stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        page.test_btn.click()
        wait_for(qtbot, lambda: page.result.text().startswith(("✓", "✗")), 30_000)
        assert page.result.text().startswith("✓") and MODEL in page.result.text(), page.result.text()
        assert srv.seen_auth[-1] == f"Bearer {KEY}"            # the stored key was used
        w._preferences.close()  # type: ignore[attr-defined]

        picker = w.model_picker  # type: ignore[attr-defined]
        picker.refresh()
        wait_for(qtbot, lambda: bool(picker.remote), 30_000)
        texts = [a.text() for a in picker.menu_.actions()]
        assert "box — openai" in texts and MODEL in texts and "This computer" in texts
        picker.choose_remote(*picker.remote[0][:1], MODEL)
        # The engine is swapped on the engine lane, the window updated when that job's done runs on this thread.
        wait_for(qtbot, lambda: w.ctx.engine.engine_info.get("engine") == "box" and "box" in w.model_label.text(),
                 30_000)
        # The stub saves no slots: the sidebar says resume is the server's job (issue 15, point 3).
        assert "server's job" in w.sidebar.engine_note.text() and not w.sidebar.engine_note.isHidden()

        conv = w.ctx.store.create("Remote")
        w.controller.refresh(conv.id)
        w.controller.select(conv.id)
        wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
        w.controller.send("Hello?")
        wait_idle(qtbot, w, 600_000)
        reply = w.ctx.store.branch(conv.id)[-1]
        assert reply.content == "Hello from the stub." and (reply.engine, reply.model) == ("box", MODEL)

        local = next(e for e in picker.entries)
        picker.choose(local)
        wait_for(qtbot, lambda: w.ctx.engine is w.ctx.local_engine and w.controller.model_ready, 600_000)
        wait_for(qtbot, lambda: w.sidebar.engine_note.isHidden(), 30_000)   # this computer's KV cache again
        w.controller.send("Hi again.")
        wait_idle(qtbot, w, 600_000)
        assert w.ctx.store.branch(conv.id)[-1].engine == "local"
    assert json.loads(endpoints.engines_file().read_text())["engines"][0]["name"] == "box"
