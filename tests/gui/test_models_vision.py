"""The Models page shows a vision model's projector: the Hub tab lists it beside the model (never as a model of
its own) and the Installed list marks a model with its projector beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.bench import projector
from hisho.core.executor import Executor
from hisho.core.models.store import ModelStore
from hisho.core.services import open_downloads, open_models
from hisho.gui.models.models_page import ModelsPage
from hisho.gui.shell.bridge import Bridge
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub
from tests.core.test_hub_projector import REPO, serve_pair

__all__ = ["hub"]


@pytest.fixture
def page(qtbot: QtBot, hub: FakeHub) -> Iterator[ModelsPage]:
    workers = Executor(Bridge().post)
    models = open_models()
    p = ModelsPage(workers, models, open_downloads(models))
    qtbot.addWidget(p)
    p.show()
    yield p
    p.downloads.pause_all()
    workers.shutdown(10)


def test_hub_tab_lists_the_projector_with_its_model(qtbot: QtBot, page: ModelsPage, hub: FakeHub,
                                                     tmp_path: Path) -> None:
    _model, proj = serve_pair(hub, tmp_path)
    page.tabs.setCurrentWidget(page.hub)
    page.hub.open_repo(REPO)
    qtbot.waitUntil(lambda: page.hub.files.rowCount() == 1 and page.hub.files.item(0, 2) is not None,
                    timeout=60_000)
    size = page.hub.files.item(0, 2)
    assert "projector" in size.text() and proj.name in size.toolTip()


def test_installed_list_marks_a_model_that_sees_images(qtbot: QtBot, page: ModelsPage) -> None:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    ModelStore().add(pair[0], name="tiny-vl")
    page.refresh()
    qtbot.waitUntil(lambda: any(e.name == "tiny-vl" for e in page.entries), timeout=60_000)
    row = next(i for i, e in enumerate(page.entries) if e.name == "tiny-vl")
    assert "sees images" in page.model_table.item(row, 1).text()
    others = [i for i, e in enumerate(page.entries) if e.name != "tiny-vl"]
    assert all("sees images" not in page.model_table.item(i, 1).text() for i in others)
