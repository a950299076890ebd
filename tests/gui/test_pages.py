"""Models, the Memory planner and Settings are pages of the main window: the Models page comes back after it
was closed and the model switched from the header; every page lies inside the window at 1280×720 and follows
the theme; the planner says which model it plans for, shows the same numbers in its bar and its text, uses what
it shows, and plans a hub file being considered."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.models.store import ModelStore
from hisho.core.units import GIB
from hisho.gui.models.models_page import ModelsPage
from hisho.gui.models.planner_panel import PlannerPanel
from hisho.gui.shell import theme
from hisho.gui.shell.main_window import MainWindow
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub, write_payload_gguf
from tests.gui.conftest import settle, wait_for, wait_idle

__all__ = ["hub"]


def view_action(w: MainWindow, text: str) -> None:
    next(a for a in w.view_menu.actions() if a.text() == text).trigger()


def inside(outer: QWidget, inner: QWidget) -> bool:
    top_left = inner.mapTo(outer, QPoint(0, 0))
    return outer.rect().contains(top_left) and outer.rect().contains(
        top_left + QPoint(inner.width() - 1, inner.height() - 1))


def test_models_page_opens_again_after_close_and_a_model_switch(qtbot: QtBot, window: MainWindow,
                                                                default_model_path: Path) -> None:
    w = window
    second = ModelStore().add(default_model_path, name="smollm2-second", copy=True)
    view_action(w, "Models")                        # Ctrl+M
    page = w.findChild(ModelsPage)
    assert isinstance(page, ModelsPage) and page.isVisible()
    assert page.window() is w                       # a page of the window, not a window of its own
    page.close()                                    # what the title bar's × did
    settle(qtbot)
    assert w.host.current_name() == "chats" and w.composer.isVisible()

    w.model_picker.choose(second)                   # switch model from the chat header
    wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
             and w.ctx.engine.load_params.model_path == second.path, 120_000)
    view_action(w, "Models")
    again = w.findChild(ModelsPage)
    assert again is page and page.isVisible() and page.window() is w and w.host.currentWidget() is page
    assert inside(w, page)
    w.host.back()
    qtbot.keyClick(w, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert w.host.currentWidget() is page and page.isVisible()
    qtbot.keyClick(w, Qt.Key.Key_Escape)            # Esc leaves a page
    assert w.host.current_name() == "chats"
    wait_idle(qtbot, w)


def test_every_page_lies_in_the_window_at_1280x720_and_follows_the_theme(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    w.resize(1280, 720)
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    try:
        for name in ("dark", "light"):
            w.controller.set_theme(name)
            for page_name, action in (("models", "Models"), ("planner", "Memory planner")):
                view_action(w, action)
                page = w.host.currentWidget()
                settle(qtbot, 0.1)
                assert w.host.current_name() == page_name and inside(w, page) and w.width() == 1280
                assert w.rail.buttons[page_name].isChecked()
            next(a for a in w.file_menu.actions() if a.text() == "Settings…").trigger()
            settings = w.host.currentWidget()
            assert w.host.current_name() == "settings" and inside(w, settings)
            tops = [t for t in QApplication.topLevelWidgets() if t.isVisible() and t.isWindow()]
            assert tops == [w], tops                # nothing opened beside the window
            planner = w.host.page("planner")
            assert isinstance(planner, PlannerPanel)
            # The bar's empty track is the theme's colour (it was a fixed light grey in the dark theme too).
            image = planner.bar.grab().toImage()
            track = image.pixelColor(image.width() - 4, image.height() // 2).name()
            assert track == theme.choose(name).hover, (name, track)
    finally:
        w.controller.set_theme("system")
        wait_idle(qtbot, w)


def _numbers(panel: PlannerPanel) -> tuple[str, str]:
    """(need, budget) as the text says them, and as the bar draws them."""
    text = panel.ctx_label.text()
    said = text.split(": ", 1)[1].split(" — ")[0]       # "resident 0.32 GiB of 20.01 GiB"
    drawn = f"{panel.bar.parts and sum(panel.bar.parts.values()) / GIB:.2f} GiB of {panel.bar.budget / GIB:.2f} GiB"
    return said.split(" ", 1)[1], drawn


def test_planner_page_names_its_model_says_the_bar_s_numbers_and_uses_them(qtbot: QtBot,
                                                                         window: MainWindow) -> None:
    w = window
    view_action(w, "Memory planner")
    page = w.host.currentWidget()
    from hisho.gui.models.planner_page import PlannerPage

    assert isinstance(page, PlannerPage)
    wait_for(qtbot, lambda: page.plans > 0, 180_000)
    loaded = Path(str(w.ctx.engine.load_params.model_path)).name  # type: ignore[union-attr]
    assert loaded in page.subject.text() and "in use" in page.subject.text()
    said, drawn = _numbers(page)
    assert said == drawn, (said, drawn)
    # The search's reason names the figure of the configuration shown, not one from before a late change.
    assert f"{page.bar.parts and sum(page.bar.parts.values()) / GIB:.2f} GiB" in page.reason.text()

    page.set_context(8192)
    page.set_kv_type("q8_0")
    said, drawn = _numbers(page)
    assert said == drawn and "8192 tokens" in page.ctx_label.text() and "q8_0" in page.choice.text()
    assert page.current is not None and page.current.config.type_v == "q8_0" and page.current.config.flash_attn
    page.apply.click()
    model_path = str(w.ctx.engine.load_params.model_path)  # type: ignore[union-attr]
    wait_for(qtbot, lambda: settings_mod.load().choice_for(model_path).get("n_ctx") == 8192)
    s = settings_mod.load()
    # The loaded model's own choice: the defaults every other model loads with are unchanged.
    assert s.choice_for(model_path) == {"n_ctx": 8192, "kv_type": "q8_0"}
    assert s["n_ctx"] == 4096 and s["kv_type"] == "f16"
    assert "8,192 tokens" in w.toast.text() and w.toast.action_button.text() == "Reload now"
    # The grid prices other contexts and KV types; a click shows that cell on the bar, with its numbers.
    cell = page.grid.item(0, 0)
    assert cell is not None and page.grid.contexts[0] == 2048
    page.grid.cellClicked.emit(0, 0)
    said, drawn = _numbers(page)
    assert said == drawn and "2048 tokens" in page.ctx_label.text() and "KV f16/f16" in page.choice.text()
    assert cell.text().startswith(drawn.split(" of ")[0])
    wait_idle(qtbot, w)


def test_planner_plans_a_hub_file_from_the_hub_tab(qtbot: QtBot, window: MainWindow, hub: FakeHub,
                                                  tmp_path: Path) -> None:
    w = window
    repo = "org/Tiny-GGUF"
    hub.add_file(repo, "tiny-Q4_K_M.gguf", write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", 1))
    view_action(w, "Models")
    models = w.host.currentWidget()
    assert isinstance(models, ModelsPage)
    hubtab = models.hub
    models.tabs.setCurrentWidget(hubtab)
    hubtab.open_repo(repo)
    hubtab.query.setFocus()
    qtbot.keyClick(hubtab.query, Qt.Key.Key_Escape)     # Esc in a page's text field stays on the page
    assert w.host.currentWidget() is models
    wait_for(qtbot, lambda: len(hubtab.fits) == 1)
    button = hubtab.plan_button  # type: ignore[attr-defined]
    assert not button.isEnabled()
    hubtab.files.selectRow(0)
    assert button.isEnabled() and button.isVisible()
    button.click()
    page = w.host.currentWidget()
    from hisho.gui.models.planner_page import PlannerPage

    assert isinstance(page, PlannerPage) and page.hub_file is not None
    wait_for(qtbot, lambda: page.plans > 0 and page.hub_file is not None and page.plan is not None
             and "hf:" in page.planned_for)
    assert "tiny-Q4_K_M.gguf" in page.subject.text() and "not downloaded" in page.subject.text()
    said, drawn = _numbers(page)
    assert said == drawn and page.slider.isEnabled()
    assert page.apply.text() == "Download this file" and page.back_to_loaded.isVisible()
    page.back_to_loaded.click()
    wait_for(qtbot, lambda: page.hub_file is None and page.plans > 1, 180_000)
    assert "in use" in page.subject.text()
    wait_idle(qtbot, w)
