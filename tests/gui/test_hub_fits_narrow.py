"""The Hub tab fits the window: at 700 px and at 1280 px every column of a repository's files, its Download
button included, lies inside the table's visible area, with no sideways scrolling."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from pytestqt.qtbot import QtBot

from hisho.gui.models.hub_tab import HubTab
from hisho.gui.models.models_page import open_models
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import big_model, hub, write_payload_gguf
from tests.gui.conftest import QT_NOISE, make_window, settle, wait_for

__all__ = ["hub"]
REPO = "org/Some-Long-Model-Name-Instruct-GGUF"


def visible_in_window(hub_tab: HubTab, widget_rect: QRect, origin: QPoint) -> bool:
    win = hub_tab.window()
    top_left = hub_tab.files.viewport().mapTo(win, origin)
    return win.rect().contains(QRect(top_left, widget_rect.size()))


def assert_all_columns_shown(hub_tab: HubTab) -> None:
    table = hub_tab.files
    assert table.horizontalScrollBar().maximum() == 0, "the file table scrolls sideways"
    room = table.viewport().width()
    for col in range(table.columnCount()):
        left = table.columnViewportPosition(col)
        assert left >= 0 and left + table.columnWidth(col) <= room + 1, (col, left, table.columnWidth(col), room)
    for row in range(table.rowCount()):
        button = table.cellWidget(row, 5)
        assert button is not None and button.isVisible()
        at = button.mapTo(table.viewport(), QPoint(0, 0))
        assert at.x() >= 0 and at.x() + button.width() <= room + 1, (at.x(), button.width(), room)
        assert visible_in_window(hub_tab, button.rect(), at), "the Download button is off the window"
        assert button.width() >= button.sizeHint().width() - 2, "the Download button is squeezed"


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")
def test_the_hub_files_fit_at_700_and_1280_px(qtbot: QtBot, hub: FakeHub, tmp_path: Path,
                                              default_model_path: Path) -> None:
    hub.add_repo(REPO, downloads=1234)
    hub.add_file(REPO, "Some-Long-Model-Name-Instruct-Q4_K_M.gguf", big_model(tmp_path / "big"), sha256="b" * 64)
    hub.add_file(REPO, "Some-Long-Model-Name-Instruct-Q8_0.gguf", write_payload_gguf(tmp_path / "t.gguf", 1))
    w = make_window(qtbot)
    try:
        w.resize(700, 640)
        page = open_models(w, "Hub")
        tab = page.hub
        tab.open_repo(REPO)
        wait_for(qtbot, lambda: len(tab.fits) == 2, 60_000)
        settle(qtbot, 0.3)
        assert w.width() == 700
        assert_all_columns_shown(tab)
        w.resize(1280, 720)
        settle(qtbot, 0.3)
        assert_all_columns_shown(tab)
        assert tab.files.columnWidth(4) > 150   # at 1280 the "Why" column has room to say it
    finally:
        w.close()
