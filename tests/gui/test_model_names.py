"""One model, one name: after a model switch in the real window, the model menu, the chat header, the status
bar, the Models page, the Engines page, ``hisho models list`` and the API all name the loaded model by its store
id, and the API also takes its file stem. The switch goes through the composition root, so ``ctx.model_path``
and ``ctx.load_params`` follow it (the API page serves the new model)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from pytestqt.qtbot import QtBot

from hisho.api import keys
from hisho.cli.main import main
from hisho.core.models.store import ModelStore
from hisho.gui.models.models_page import open_models
from hisho.gui.settings.api_page import start_api, stop_api
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import QT_NOISE, wait_for, wait_idle
from tests.gui.test_api_page import free_port
from tests.gui.test_engines_gui import open_engines

NAME = "pocket-owl"          # the store's id; the file's stem differs, as a hub download's does


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")   # the Models page's window
def test_a_switched_model_has_one_name_everywhere(qtbot: QtBot, window: MainWindow, tmp_path: Path,
                                                 default_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w, c = window, window.controller
    wait_for(qtbot, lambda: c.model_ready, 300_000)
    wait_idle(qtbot, w)
    other = Path(shutil.copy(default_model_path, tmp_path / "Pocket-Owl-135M.Q4_1.gguf"))
    ModelStore().add(other, name=NAME)

    picker = w.model_picker  # type: ignore[attr-defined]
    picker.refresh()
    wait_for(qtbot, lambda: any(e.name == NAME for e in picker.entries))
    picker.choose(next(e for e in picker.entries if e.name == NAME))
    wait_for(qtbot, lambda: c.model_ready and w.ctx.engine.load_params is not None
             and Path(w.ctx.engine.load_params.model_path).name == other.name, 300_000)
    wait_idle(qtbot, w)

    # the services name what runs
    assert w.ctx.model_path is not None and w.ctx.model_path.name == other.name
    assert w.ctx.load_params is not None and Path(w.ctx.load_params.model_path).name == other.name
    assert w.ctx.chat.model_name == NAME
    # the chat header and the status bar
    assert w.model_label.text() == NAME
    assert w.status.model.text().startswith(NAME)
    # the model menu: the checked entry is the loaded one, under the same name
    picker.refresh()  # the menu filled before the switch ticks the old model until the refresh lands
    wait_for(qtbot, lambda: any(a.isChecked() and a.text().split()[0] == NAME for a in picker.menu_.actions()))
    [checked] = [a.text() for a in picker.menu_.actions() if a.isChecked()]
    assert checked.split()[0] == NAME
    # the Models page: the row of the file in use
    page = open_models(w)
    qtbot.addWidget(page)
    wait_for(qtbot, lambda: page.model_table.rowCount() > 0 and any(e.name == NAME for e in page.entries))
    row = next(i for i, e in enumerate(page.entries) if Path(e.path).name == other.name)
    assert page.model_table.item(row, 0).text() == NAME
    page.close()
    # the Engines page
    engines = open_engines(w)
    assert engines.list.item(0).text() == f"Local — this computer ({NAME})"
    w._preferences.close()  # type: ignore[attr-defined]
    # hisho models list
    capsys.readouterr()
    assert main(["models", "list"]) == 0
    assert any(line.split()[0] == NAME for line in capsys.readouterr().out.splitlines())
    # the API: /v1/models lists the id; the id and the file stem both name it in a request
    w.ctx.settings.set("api_port", free_port())
    server = start_api(w)
    try:
        url = f"http://127.0.0.1:{server.port}/v1"
        key = {"Authorization": f"Bearer {keys.api_key()}"}
        listed = httpx.get(f"{url}/models", headers=key, timeout=30).json()
        assert [m["id"] for m in listed["data"]] == [NAME]
        for alias in (NAME, other.stem):
            got = httpx.post(f"{url}/chat/completions", headers=key, timeout=300, json={
                "model": alias, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
            assert got.status_code == 200, got.text
            assert got.json()["model"] == alias or got.json()["model"] == NAME
    finally:
        stop_api(w)
