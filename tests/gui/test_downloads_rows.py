"""Downloads act per row and end visibly: a finished row stays as "Verified · Load now" and Load now switches the
chat to it; a pause the user chose reads calmly, a download left by an earlier run gets a calm line, a failure
the warning; the Hub tab marks files already installed (same sha256). Everything against the hub-shaped server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.core.executor import Executor
from hisho.core.hub import repo_files
from hisho.core.services import open_downloads, open_models
from hisho.gui.models.downloads_tab import VERIFIED
from hisho.gui.models.models_page import ModelsPage
from hisho.gui.shell.bridge import Bridge
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub, write_payload_gguf
from tests.gui.conftest import QT_NOISE
from tests.gui.test_models_page import registry

__all__ = ["hub"]
MIB = 1024**2
REPO = "org/Tiny-GGUF"


@pytest.fixture
def loads() -> list[str]:
    return []


@pytest.fixture
def page(qtbot: QtBot, hub: FakeHub, loads: list[str]) -> Iterator[ModelsPage]:
    bridge = Bridge()
    workers = Executor(bridge.post)
    p = ModelsPage(workers, *registry(), load=loads.append)
    qtbot.addWidget(p)
    p.show()
    yield p
    p.downloads.pause_all()
    workers.shutdown(10)


def test_finished_row_stays_verified_and_load_now_loads_it(qtbot: QtBot, page: ModelsPage, hub: FakeHub,
                                                           tmp_path: Path, loads: list[str]) -> None:
    hub.add_file(REPO, "tiny-Q4_K_M.gguf", write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 2))
    [f] = repo_files(REPO)
    page.download(f)
    qtbot.waitUntil(lambda: page.downloads.state_text(0) == VERIFIED, timeout=60_000)
    actions = page.downloads.row_actions(0)
    assert actions is not None and actions.load.isVisible()
    assert not actions.pause.isVisible() and not actions.cancel.isVisible()
    qtbot.waitUntil(lambda: any(e.source == f"hub:{REPO}" for e in page.entries), timeout=30_000)
    entry = next(e for e in page.entries if e.source == f"hub:{REPO}")
    actions.load.click()
    assert loads == [entry.name]

    # The Hub tab knows the file is here: same sha256, so no second download is offered.
    page.tabs.setCurrentWidget(page.hub)
    page.hub.open_repo(REPO)
    qtbot.waitUntil(lambda: page.hub.files.rowCount() == 1 and page.hub.files.cellWidget(0, 5) is not None,
                    timeout=30_000)
    button = page.hub.files.cellWidget(0, 5)
    assert button.objectName() == "Installed" and "Installed" in button.text()  # type: ignore[union-attr]
    button.click()  # type: ignore[union-attr]
    assert loads == [entry.name, entry.name]


def test_a_download_left_by_an_earlier_run_is_a_calm_line(qtbot: QtBot, hub: FakeHub, tmp_path: Path) -> None:
    hub.add_file(REPO, "tiny-Q4_K_M.gguf", write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 2))
    [f] = repo_files(REPO)
    job = open_downloads(open_models()).enqueue(f)
    open_downloads(open_models()).pause(job.id)
    bridge = Bridge()
    workers = Executor(bridge.post)
    page = ModelsPage(workers, *registry())
    qtbot.addWidget(page)
    try:
        qtbot.waitUntil(lambda: page.downloads.job_table.rowCount() == 1 and page.downloads.note.text() != "",
                        timeout=30_000)
        assert "earlier session" in page.downloads.note.text()
        assert page.downloads.resume_banner.text() == ""  # not the orange "stopped before they finished"
        actions = page.downloads.row_actions(0)
        assert actions is not None and not actions.resume.isHidden() and actions.pause.isHidden()
    finally:
        workers.shutdown(10)


def test_a_failed_download_raises_the_warning(qtbot: QtBot, page: ModelsPage, hub: FakeHub,
                                              tmp_path: Path) -> None:
    src = write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 2)
    hub.add_file(REPO, "tiny-Q4_K_M.gguf", src)
    hub.corrupt.add(f"{REPO}/tiny-Q4_K_M.gguf")
    [f] = repo_files(REPO)
    page.download(f)
    qtbot.waitUntil(lambda: page.downloads.resume_banner.isVisible(), timeout=60_000)
    assert "error" in page.downloads.resume_banner.text()
    assert page.downloads.state_text(0).startswith("Failed")


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")  # the page's own window
def test_window_download_verified_row_load_now_switches_the_chat(qtbot: QtBot, window: object, hub: FakeHub,
                                                                  default_model_path: Path) -> None:
    """The scripted run: a real model file served by the hub-shaped server is downloaded from the Models page,
    its row says verified, and Load now makes the window's engine run the downloaded file."""
    from hisho.gui.models.models_page import open_models
    from hisho.gui.shell.main_window import MainWindow

    assert isinstance(window, MainWindow)
    hub.add_file("demo/Chat-GGUF", "Chat-135M-Q4_1.gguf", default_model_path)
    page = open_models(window, "Hub")
    [f] = repo_files("demo/Chat-GGUF")
    page.download(f)
    assert page.tabs.currentWidget() is page.downloads
    qtbot.waitUntil(lambda: page.downloads.state_text(0) == VERIFIED, timeout=120_000)
    actions = page.downloads.row_actions(0)
    assert actions is not None and actions.load.isVisible()
    qtbot.waitUntil(lambda: window.controller.model_ready, timeout=120_000)
    actions.load.click()
    engine = window.ctx.local_engine

    def loaded_download() -> bool:
        params = engine.load_params if engine is not None else None
        return (window.controller.model_ready and params is not None
                and Path(params.model_path).name == "Chat-135M-Q4_1.gguf")

    qtbot.waitUntil(loaded_download, timeout=300_000)
    page.close()
