"""One app state, every screen tells the same truth: after a model switch in the real window, the header, the
status bar, the model menu, Chat settings, the Engines and API pages (open before the switch, so they must
follow it) and the Memory planner all name the new model; the status bar's speed and TTFT are blank until the
new model has answered. The planner says "installed" for a hub file whose bytes are installed (same sha256)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from hisho.api.launch import model_name
from hisho.core.hub.catalog import repo_files
from hisho.core.settings import load as load_settings
from hisho.gui.models.planner_page import PlannerPage, open_planner
from hisho.gui.settings.api_page import ApiPage, start_api, stop_api
from hisho.gui.settings.settings_dialog import ConversationSettingsDialog
from hisho.gui.shell.main_window import MainWindow
from hisho_dev.hub_server import FakeHub, sha256_of
from tests.core.hub_fixtures import hub, write_payload_gguf
from tests.gui.conftest import QT_NOISE, wait_for, wait_idle, wait_reply
from tests.gui.test_api_page import free_port
from tests.gui.test_engines_gui import open_engines

__all__ = ["hub"]

NAME = "pocket-owl"


def chat_settings_model(w: MainWindow) -> tuple[str, str]:
    """Open the chat's settings as the user does (the header's button) and read its model row and the line
    that says which model answers; the dialog is then cancelled."""
    seen: list[tuple[str, str]] = []
    tries = [0]

    def read() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, ConversationSettingsDialog):
            tries[0] += 1
            if tries[0] < 400:                  # 20 s, then whatever opened is closed: the wait has an end
                QTimer.singleShot(50, read)
            else:
                for w in QApplication.topLevelWidgets():
                    if isinstance(w, ConversationSettingsDialog):
                        w.reject()
            return
        seen.append((str(dialog.model.currentData()), dialog.answering.text()))
        dialog.reject()

    QTimer.singleShot(0, read)
    w.settings_button.click()
    assert seen, "the chat settings dialog did not open"
    return seen[0]


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")
def test_a_model_switch_renames_every_screen_and_blanks_the_figures(qtbot: QtBot, window: MainWindow,
                                                                    tmp_path: Path,
                                                                    default_model_path: Path) -> None:
    w, c = window, window.controller
    wait_idle(qtbot, w)
    first = w.ctx.state.now
    assert first.loaded and not first.remote and first.model == w.ctx.model_name
    other = Path(shutil.copy(default_model_path, tmp_path / "Pocket-Owl-135M.Q4_1.gguf"))
    w.ctx.models.add(other, name=NAME)
    conv = w.ctx.store.create("Which model?")
    c.refresh(conv.id)
    c.select(conv.id)
    wait_for(qtbot, lambda: c.current is not None and c.current.id == conv.id)
    assert chat_settings_model(w) == (first.model.id, f"Answering now: {first.model.display}")
    # pages open before the switch: they must follow it, not be rebuilt
    engines = open_engines(w)
    dialog = w._preferences
    assert dialog is not None
    api = next(dialog.pages.widget(i) for i in range(dialog.pages.count())
               if isinstance(dialog.pages.widget(i), ApiPage))
    assert isinstance(api, ApiPage)
    w.ctx.settings.set("api_port", free_port())
    start_api(w)
    try:
        api._show()
        assert f'"{first.model.id}"' in api.status.text()
        picker = w.model_picker
        assert picker is not None
        picker.refresh()
        wait_for(qtbot, lambda: any(e.name == NAME for e in picker.entries))
        w.status.set_reply_figures(118.4, 0.42)   # the last model's figures, as after a reply

        c.switch_model(NAME)
        wait_for(qtbot, lambda: c.model_ready and w.ctx.state.now.model.id == NAME, 300_000)
        wait_idle(qtbot, w)

        now = w.ctx.state.now
        assert now.loaded and not now.remote and Path(now.path).name == other.name and now.n_ctx > 0
        assert now.tokens_per_s is None and now.ttft_s is None
        # the header, the status bar (figures blank until the new model answers), the model menu
        assert w.model_label.text() == NAME
        assert w.status.model.text().startswith(NAME)
        assert w.status.speed.text() == "— tok/s" and w.status.ttft.text() == "TTFT —"
        [checked] = [a.text() for a in picker.menu_.actions() if a.isChecked()]
        assert checked.split()[0] == NAME
        # the Engines and API pages, still open, and what the API serves
        assert engines.list.item(0).text() == f"Local — this computer ({NAME})"
        assert f'"{NAME}"' in api.status.text()
        assert model_name(w.ctx).id == NAME
        # Chat settings: a chat that names no model of its own shows the one answering
        assert chat_settings_model(w) == (NAME, f"Answering now: {NAME}")
        # the next start opens on it (the last model used, kept in the settings)
        wait_for(qtbot, lambda: not w.ctx.executor.busy("store"))
        assert w.ctx.settings["last_model"] == NAME and load_settings()["last_model"] == NAME
        # the Memory planner plans the model in use
        page = open_planner(w)
        wait_for(qtbot, lambda: page.plans > 0 and page.planned_for == now.path, 180_000)
        assert other.name in page.subject.text()
        # once the new model has answered, its own figures show, and the state has them
        known = {m.id for m in w.ctx.store.branch(conv.id)}
        w.composer.set_text("Hi")
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        wait_reply(qtbot, w, conv.id, known)
        wait_for(qtbot, lambda: w.ctx.state.now.tokens_per_s is not None)
        assert w.status.speed.text() != "— tok/s"
        assert w.ctx.state.now.model.id == NAME
    finally:
        stop_api(w)
        w._preferences.close()   # type: ignore[union-attr]


def test_the_planner_says_installed_for_a_hub_file_already_here(qtbot: QtBot, window: MainWindow, hub: FakeHub,
                                                              tmp_path: Path) -> None:
    w = window
    repo = "org/Tiny-GGUF"
    local = write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 1)
    hub.add_file(repo, "tiny-Q4_K_M.gguf", local)
    [f] = repo_files(repo)
    page = open_planner(w)
    assert isinstance(page, PlannerPage)
    page.plan_hub_file(f)
    wait_for(qtbot, lambda: page.plans > 0 and page.planned_for.startswith("hf:"), 180_000)
    assert page.apply.text() == "Download this file" and not page.installed_as
    installed = Path(shutil.copy(local, tmp_path / "tiny-copy.gguf"))
    w.ctx.models.add(installed, name="tiny-here", source=f"hub:{repo}", sha256=sha256_of(local))
    page.plan_hub_file(f)
    wait_for(qtbot, lambda: page.plans > 1, 180_000)
    assert page.installed_as == "tiny-here"
    assert page.apply.text() == "✓ Installed as tiny-here · Load"
    assert "installed here as" in page.subject.text() and "not downloaded" not in page.subject.text()
    wait_idle(qtbot, w)


def test_the_root_owns_the_api_server_and_stops_it_at_exit(qtbot: QtBot, window: MainWindow) -> None:
    """The window's Settings → API switch asks the root to serve; the root replaces it on a restart and
    stops it when the services close, whoever closes them (no server outlives the engine it runs on)."""
    w = window
    w.ctx.settings.set("api_port", free_port())
    first = start_api(w)
    assert w.ctx.served is first
    second = start_api(w)                      # a restart (a changed limit) replaces it on the same port
    assert w.ctx.served is second and first is not second
    url = second.url
    assert httpx.get(f"{url}/models", timeout=10, headers={"Authorization": "Bearer x"}).status_code == 401
    w.ctx.close()
    assert w.ctx.served is None
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/models", timeout=2)
