"""The Models page against the hub-shaped test server: search and paging, fit badges, a download with progress,
pause and resume, delete. The page runs standalone with the app's bridge and worker lanes (no model loaded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QMessageBox, QProgressBar
from pytestqt.qtbot import QtBot

from hisho.bench.hub_server import FakeHub
from hisho.core.executor import Executor
from hisho.core.models import ModelStore
from hisho.gui.bridge import Bridge
from hisho.gui.models_page import ModelsPage
from tests.core.hub_fixtures import big_model, hub, write_payload_gguf

__all__ = ["hub"]
MIB = 1024**2
REPO = "org/Tiny-GGUF"


@pytest.fixture
def page(qtbot: QtBot, hub: FakeHub) -> Iterator[ModelsPage]:
    bridge = Bridge()
    workers = Executor(bridge.post)
    p = ModelsPage(workers)
    qtbot.addWidget(p)
    p.show()
    yield p
    p.downloads.pause_all()
    workers.shutdown(10)


def serve(hub: FakeHub, tmp_path: Path, mib: int = 4) -> Path:
    path = write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", mib)
    hub.add_file(REPO, "tiny-Q4_K_M.gguf", path)
    return path


def test_search_pages_and_fit_badges(qtbot: QtBot, page: ModelsPage, hub: FakeHub, tmp_path: Path) -> None:
    for i in range(25):
        hub.add_repo(f"org/model{i:02d}-GGUF", downloads=1000 - i)
    big = big_model(tmp_path / "big")
    hub.add_file("org/model00-GGUF", big.name, big, sha256="b" * 64)
    hub.add_file("org/model00-GGUF", "tiny-Q4_K_M.gguf", write_payload_gguf(tmp_path / "t.gguf", 1))
    page.tabs.setCurrentWidget(page.hub)
    page.hub.query.setText("model")
    page.hub.search()
    qtbot.waitUntil(lambda: page.hub.results.count() == 20, timeout=60_000)  # the lane may be planning Installed
    assert page.hub.more.isVisible()
    page.hub.more.click()
    qtbot.waitUntil(lambda: page.hub.results.count() == 25, timeout=60_000)
    page.hub.results.setCurrentRow(0)
    qtbot.waitUntil(lambda: len(page.hub.fits) == 2, timeout=60_000)
    assert all(page.hub.files.item(row, 1).text()[-1] in "MB" for row in range(2))  # the parameter count
    badges = [page.hub.files.cellWidget(r, 3) for r in range(2)]
    assert all(isinstance(b, QLabel) and b.property("verdict") in ("fits", "tight", "wont_fit") for b in badges)
    assert sum(1 for f in page.hub.fits if f.recommended) == 1
    assert "Recommended" in page.hub.recommend.text()


def test_offline_says_so_in_one_line(qtbot: QtBot, page: ModelsPage, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    page.hub.query.setText("llama")
    page.hub.search()
    qtbot.waitUntil(lambda: page.hub.status.text().startswith("Offline"), timeout=60_000)
    assert "\n" not in page.hub.status.text()


def test_download_progress_pause_resume_then_delete(qtbot: QtBot, page: ModelsPage, hub: FakeHub,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = serve(hub, tmp_path, 12)
    hub.throttle = 6 * MIB
    from hisho.core.hub import repo_files

    [f] = repo_files(REPO)
    page.download(f)
    qtbot.waitUntil(lambda: any(p.done > 2 * MIB for p in page.downloads.live.values()), timeout=30_000)
    [job_id] = list(page.downloads.queued)
    page.downloads.pause(job_id)
    qtbot.waitUntil(lambda: not page.downloads.queued, timeout=60_000)
    qtbot.waitUntil(lambda: "paused" in (page.downloads.job_table.item(0, 5).text() if page.downloads.job_table.item(0, 5) else ""),
                    timeout=60_000)
    assert page.downloads.resume_banner.isVisible()
    hub.throttle = None
    page.downloads.job_table.selectRow(0)
    page.downloads.resume_button.click()
    qtbot.waitUntil(lambda: any(e.source == f"hub:{REPO}" for e in page.entries), timeout=30_000)
    qtbot.waitUntil(lambda: page.downloads.job_table.rowCount() == 0, timeout=60_000)  # listed after the models
    entry = next(e for e in page.entries if e.source == f"hub:{REPO}")
    assert Path(entry.path).read_bytes() == src.read_bytes()
    bars = page.findChildren(QProgressBar)
    assert bars is not None

    row = next(i for i, e in enumerate(page.entries) if e.name == entry.name)
    page.model_table.selectRow(row)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    page.delete_button.click()
    qtbot.waitUntil(lambda: all(e.name != entry.name for e in page.entries), timeout=60_000)
    assert not Path(entry.path).exists()
    assert ModelStore().get(entry.name) is None


def test_model_picker_lists_models_and_switches(qtbot: QtBot, window: object, tmp_path: Path) -> None:
    from hisho.gui.main_window import MainWindow
    from tests.core.test_models_store import write_tiny_gguf

    assert isinstance(window, MainWindow)
    picker = window.model_picker
    picker.refresh()
    qtbot.waitUntil(lambda: len(picker.entries) == 1, timeout=60_000)
    [current] = [a for a in picker.menu_.actions() if a.isCheckable()]
    assert current.isChecked()  # the loaded model is ticked
    ModelStore().add(write_tiny_gguf(tmp_path / "Other.gguf"), name="other")
    picker.refresh()
    qtbot.waitUntil(lambda: len(picker.entries) == 2, timeout=60_000)
    switched: list[str] = []
    window.controller.switch_model = lambda name, override=False: switched.append(name)  # type: ignore[method-assign]
    other = next(e for e in picker.entries if e.name == "other")
    picker.choose(other)
    assert switched == ["other"]
    assert "KV snapshots" in window.toast.text()  # messages with an action are toasts over the chat
