"""The Models page against the hub-shaped test server: search and paging, fit badges, a download with progress,
pause and resume, delete. The page runs standalone with the app's bridge and worker lanes (no model loaded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QMessageBox, QProgressBar
from pytestqt.qtbot import QtBot

from hisho.core.executor import Executor
from hisho.core.hub.download import Downloader
from hisho.core.models.store import ModelStore
from hisho.core.services import open_downloads, open_models
from hisho.gui.models.downloads_tab import PAUSED_BY_USER, VERIFIED
from hisho.gui.models.models_page import ModelsPage
from hisho.gui.shell.bridge import Bridge
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import big_model, hub, write_payload_gguf

__all__ = ["hub"]
MIB = 1024**2
REPO = "org/Tiny-GGUF"


def registry() -> tuple[ModelStore, Downloader]:
    """The model registry and the download queue, made as the composition root makes them."""
    models = open_models()
    return models, open_downloads(models)


@pytest.fixture
def page(qtbot: QtBot, hub: FakeHub) -> Iterator[ModelsPage]:
    bridge = Bridge()
    workers = Executor(bridge.post)
    p = ModelsPage(workers, *registry())
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
    actions = page.downloads.row_actions(0)
    assert actions is not None and actions.pause.isVisible() and not actions.resume.isVisible()
    actions.pause.click()  # the row's own button: nothing to select first
    qtbot.waitUntil(lambda: not page.downloads.queued, timeout=60_000)
    qtbot.waitUntil(lambda: page.downloads.state_text(0) == PAUSED_BY_USER, timeout=60_000)
    assert not page.downloads.resume_banner.isVisible()  # a pause the user chose is no warning
    hub.throttle = None
    actions = page.downloads.row_actions(0)
    assert actions is not None and actions.resume.isVisible() and not actions.pause.isVisible()
    actions.resume.click()
    qtbot.waitUntil(lambda: any(e.source == f"hub:{REPO}" for e in page.entries), timeout=30_000)
    qtbot.waitUntil(lambda: page.downloads.state_text(0) == VERIFIED, timeout=60_000)  # the row stays
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
    from hisho.gui.shell.main_window import MainWindow
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


def test_delete_says_which_kv_snapshots_go_with_the_model(qtbot: QtBot, page: ModelsPage, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from hisho.core.kv import format as kvf
    from hisho.core.kv.index import KVIndex
    from hisho.core.models import identity as model_identity
    from hisho.core.units import format_bytes
    from tests.core.test_models_store import write_tiny_gguf

    entry = ModelStore().add(write_tiny_gguf(tmp_path / "Tiny.gguf"), name="tiny", copy=True)
    index = KVIndex()
    fp = kvf.fingerprint({"model": "tiny"})
    model = {"path": entry.path, **model_identity.identity(entry.path)}
    tokens = list(range(12))
    for owner, n in (("conv:1", 12), ("conv:2", 8)):  # conv:2's prefix is conv:1's first two chunks
        chunks = []
        for plan in kvf.plan_chunks(fp, tokens[:n], 4):
            path = kvf.chunk_path(index.kv_dir, fp, plan.key)
            payload = bytes(30_000)
            if not path.exists():
                kvf.write_atomic(path, kvf.encode_header(fp, plan, tokens[plan.start:plan.end], payload), payload)
            chunks.append({"key": plan.key, "parent": plan.parent, "start": plan.start, "n_tokens": plan.n_tokens,
                           "path": str(path), "tokens": tokens[plan.start:plan.end], "bytes": path.stat().st_size})
        index.record_save(owner, fp, chunks, model)
    kv_files = sorted((index.kv_dir / fp[:16]).glob("*.hkv"))
    assert len(kv_files) == 3
    size = format_bytes(sum(p.stat().st_size for p in kv_files))

    page.refresh()
    qtbot.waitUntil(lambda: any(e.name == "tiny" for e in page.entries), timeout=60_000)
    page.model_table.selectRow(next(i for i, e in enumerate(page.entries) if e.name == "tiny"))
    asked: list[str] = []

    def answer(_parent: object, _title: str, text: str, *a: object) -> QMessageBox.StandardButton:
        asked.append(text)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", answer)
    page.delete_button.click()
    qtbot.waitUntil(lambda: bool(asked), timeout=60_000)
    assert asked[0].splitlines()[-1] == f"2 KV snapshots ({size}) go with it."
    assert "This frees" in asked[0]
    qtbot.waitUntil(lambda: all(e.name != "tiny" for e in page.entries), timeout=60_000)
    assert not any(p.exists() for p in kv_files)
    assert KVIndex().usage_all() == {}


def test_the_model_in_use_is_not_deleted_under_the_engine(qtbot: QtBot, page: ModelsPage, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine maps the loaded file: deleting it would leave the chat on a file that is gone and fail at the
    engine's next start. The page says to switch first, asks nothing and deletes nothing."""
    from tests.core.test_models_store import write_tiny_gguf

    entry = ModelStore().add(write_tiny_gguf(tmp_path / "Tiny.gguf"), name="tiny", copy=True)
    page.in_use = lambda: entry.path
    page.refresh()
    qtbot.waitUntil(lambda: any(e.name == "tiny" for e in page.entries), timeout=60_000)
    page.model_table.selectRow(next(i for i, e in enumerate(page.entries) if e.name == "tiny"))
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: asked.append(str(a[2])) or QMessageBox.StandardButton.Yes)
    page.delete_button.click()
    qtbot.wait(200)
    assert "tiny is the model in use" in page.installed_status.text() and not asked
    assert ModelStore().get("tiny") is not None and Path(entry.path).exists()


def test_gated_repo_asks_for_a_token_then_lists_with_badges(qtbot: QtBot, page: ModelsPage, hub: FakeHub,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    from PySide6.QtWidgets import QInputDialog

    from hisho.core.hub import token as token_mod

    gated = "meta/Gated-GGUF"
    hub.add_repo(gated, gated=True)
    hub.add_file(gated, "tiny-Q4_K_M.gguf", write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 1))
    answers = [("", False), ("hf_wrong", True), (hub.token, True)]  # cancel, a wrong token, the right one
    asked: list[str] = []

    def get_text(_parent: object, title: str, *a: object, **k: object) -> tuple[str, bool]:
        asked.append(title)
        return answers[len(asked) - 1]

    monkeypatch.setattr(QInputDialog, "getText", get_text)
    page.tabs.setCurrentWidget(page.hub)
    status = page.hub.status

    # No token: opening the repository asks for one; cancelled, the tab says what is missing in one line.
    page.hub.open_repo(gated)
    qtbot.waitUntil(lambda: len(asked) == 1 and "gated" in status.text(), timeout=60_000)
    assert "add a Hugging Face token" in status.text() and "\n" not in status.text()
    assert page.hub.retry.isVisible() and page.hub.files.rowCount() == 1
    assert page.hub.files.cellWidget(0, 3).text() == "—"  # not "checking…" for ever
    assert token_mod.get_token() is None

    # A wrong token: stored, the repository opened again, refused in one line, and not asked again by itself.
    page.hub.token_button.click()
    qtbot.waitUntil(lambda: "refused" in status.text(), timeout=60_000)
    assert len(asked) == 2 and "\n" not in status.text()
    assert token_mod.get_token() == "hf_wrong"

    # The right token: stored in a file only this user can read; the files list with their fit badges.
    page.hub.token_button.click()
    qtbot.waitUntil(lambda: len(page.hub.fits) == 1, timeout=60_000)
    assert len(asked) == 3
    badge = page.hub.files.cellWidget(0, 3)
    assert isinstance(badge, QLabel) and badge.property("verdict") in ("fits", "tight", "wont_fit")
    assert page.hub.fits[0].recommended and "Recommended" in page.hub.recommend.text()
    assert status.text() == f"1 GGUF models in {gated}"
    path = token_mod.token_file()
    assert path.read_text(encoding="utf-8") == hub.token and (path.stat().st_mode & 0o777) == 0o600
    assert hub.token not in caplog.text and "hf_wrong" not in caplog.text


def test_hub_tab_opens_on_the_models_best_for_this_computer(qtbot: QtBot, hub: FakeHub) -> None:
    """Before any search: the well-known models, the best that fits and answers fast enough here first (a
    recorded profile of a slow laptop: the 7B fits a 16 GiB machine but would answer at ~4 tok/s)."""
    from hisho.core.hub.suggest import CANDIDATES
    from hisho.core.machine import Machine
    from hisho.core.planner import speed
    from hisho.gui.models import hub_best
    from tests.core.test_speed import FIXTURE

    profile = speed.load_profile(FIXTURE)
    assert profile is not None
    speed.save_profile(profile)
    machine = Machine(platform="linux", ram_total=16 << 30, ram_available=16 << 30, cpu_threads=2)
    bridge = Bridge()
    workers = Executor(bridge.post)
    try:
        p = ModelsPage(workers, *registry())
        qtbot.addWidget(p)
        p.hub.budget = lambda: (machine.budget(), {})  # type: ignore[method-assign]
        hub_best.show_best(p.hub)
        qtbot.waitUntil(lambda: p.hub.results.count() == len(CANDIDATES), timeout=60_000)
        first = p.hub.results.item(0)
        assert first is not None and first.text().startswith("★ ") and "tok/s" in first.text()
        assert CANDIDATES[-1].title not in first.text()  # the 7B is not the one offered first: too slow here
        texts = [p.hub.results.item(i).text() for i in range(p.hub.results.count())]
        # fast enough ones first; the slow one says so in the badge word every screen uses
        assert CANDIDATES[-1].title in texts[-1] and "\nSlow here · " in texts[-1]
        assert not any("Slow here" in t for t in texts[:-1])
        assert "would answer at about" in p.hub.status.text()
        p.hub.results.setCurrentRow(0)  # picking one opens its repository
        assert p.hub.repo == first.data(256)
    finally:
        p.downloads.pause_all()
        workers.shutdown(10)


def test_installed_marks_the_model_that_answers_and_load_returns_to_the_chat(qtbot: QtBot, window: object,
                                                                            tmp_path: Path) -> None:
    from hisho.gui.shell.main_window import MainWindow
    from tests.core.test_models_store import write_tiny_gguf

    assert isinstance(window, MainWindow)
    ModelStore().add(write_tiny_gguf(tmp_path / "Other.gguf"), name="other")
    page = window.show_page("models")
    assert isinstance(page, ModelsPage)
    page.refresh()
    qtbot.waitUntil(lambda: len(page.entries) == 2, timeout=60_000)
    names = [page.model_table.item(row, 0).text() for row in range(2)]
    answering = window.ctx.state.now.model.id
    assert sorted(names) == sorted([answering, "other"])     # the names as they are: a model has one name
    mine, theirs = (page.model_table.item(names.index(n), 0) for n in (answering, "other"))
    assert mine.font().bold() and mine.toolTip().startswith("Answering now · ") and mine.data(1) is not None
    assert not theirs.font().bold() and not theirs.toolTip().startswith("Answering") and theirs.data(1) is None
    switched: list[str] = []
    page.load_model = switched.append      # the load itself is the controller's (tested with the picker)
    page.model_table.selectRow(names.index("other"))
    page.load_button.click()
    assert switched == ["other"]
    assert window.host.current_name() == "chats"   # back to the chat, where the load shows


def test_hub_suggestions_star_the_cards_pick_only_once_measured_and_fit_a_narrow_list(
        qtbot: QtBot, hub: FakeHub) -> None:
    """The Hub's suggestions and the first-run card ask the same ``suggest``: no star and no speed before this
    machine is measured; after, the starred line is the card's pick, the heading says it in the card's words,
    and every line fits the list without eliding, at the window's 700 px layout too."""
    from hisho.core.hub.suggest import CANDIDATES, offer_line, suggest
    from hisho.core.machine import Machine
    from hisho.core.planner import speed
    from hisho.gui.models import hub_best
    from tests.core.test_speed import FIXTURE

    machine = Machine(platform="linux", ram_total=16 << 30, ram_available=16 << 30, cpu_threads=2)
    lines, heading = hub_best.lines_for(machine.budget(), None, frozenset())
    assert not any("★" in ln.text or "tok/s" in ln.text for ln in lines) and "Measuring this computer" in heading
    profile = speed.load_profile(FIXTURE)
    assert profile is not None
    speed.save_profile(profile)
    pick = suggest(machine.budget(), profile)
    assert pick is not None
    lines, heading = hub_best.lines_for(machine.budget(), profile, frozenset())
    assert lines[0].text.startswith(f"★ {pick.title}\n") and offer_line(pick, profile) in heading
    bridge = Bridge()
    workers = Executor(bridge.post)
    try:
        p = ModelsPage(workers, *registry())
        qtbot.addWidget(p)
        p.hub.budget = lambda: (machine.budget(), {})  # type: ignore[method-assign]
        for width in (1280, 700):
            p.resize(width, 720)
            p.show()
            hub_best.show_best(p.hub)
            qtbot.waitUntil(lambda: p.hub.results.count() == len(CANDIDATES), timeout=60_000)
            qtbot.wait(50)
            view = p.hub.results
            metrics = view.fontMetrics()
            room = view.viewport().width()
            for i in range(view.count()):
                item = view.item(i)
                rect = view.visualItemRect(item)
                for row in item.text().split("\n"):
                    # each row is shown whole in a list 260 px wide (the list's width in a 700 px window)
                    assert metrics.horizontalAdvance(row) <= min(room, 260), (width, row, room)
                assert rect.height() >= metrics.height() * len(item.text().split("\n")), (width, item.text())
    finally:
        p.downloads.pause_all()
        workers.shutdown(10)
