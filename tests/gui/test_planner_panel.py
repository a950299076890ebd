"""The planner panel: the bar shows the plan against the budget, the context slider re-prices it live, and
View → Memory planner in the real window plans the loaded model."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from hisho.core.machine import Budget
from hisho.core.planner import plan
from hisho.gui.models.planner_panel import PlannerPanel, segments_of
from hisho.gui.shell.main_window import MainWindow
from tests.core.test_planner import smollm

GIB = 1024**3


def make_plan(ram_gib: float = 0.3) -> tuple[object, object]:
    facts, calib = smollm()
    budget = Budget(ram=int(ram_gib * GIB), gpu=0, unified=False, headroom=0, metric="resident", explain="test")
    return plan([facts], budget, min_ctx=1024, target_ctx=2048, calibration=lambda f: calib), calib


def test_bar_matches_plan_and_slider_reprices(qtbot: QtBot) -> None:
    p, calib = make_plan()
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.show_plan(p, calib)  # type: ignore[arg-type]
    assert "2048 tokens" in panel.choice.text() and "Q4_1" in panel.choice.text()
    assert sum(panel.bar.parts.values()) == p.need  # type: ignore[attr-defined]
    assert panel.bar.budget == int(0.3 * GIB)
    before = sum(panel.bar.parts.values())
    panel.set_context(8192)
    assert panel.current is not None and panel.current.config.n_ctx == 8192
    assert sum(panel.bar.parts.values()) > before  # more context, more KV
    assert panel.bar.parts["kv"] == 4 * segments_of(p)["kv"]  # type: ignore[arg-type]
    assert "8192 tokens" in panel.ctx_label.text()
    panel.grab()  # paints without error


def test_slider_shows_when_it_stops_fitting(qtbot: QtBot) -> None:
    p, calib = make_plan(ram_gib=0.2)
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.show_plan(p, calib)  # type: ignore[arg-type]
    assert "fits" in panel.ctx_label.text() and "NOT" not in panel.ctx_label.text()
    panel.set_context(8192)
    assert "does NOT fit" in panel.ctx_label.text()
    assert panel.bar.scale() > panel.bar.budget


def test_view_menu_opens_the_planner(qtbot: QtBot, window: MainWindow) -> None:
    actions = [a for a in window.view_menu.actions() if a.text() == "Memory planner"]
    assert len(actions) == 1
    actions[0].trigger()
    panels = window.findChildren(PlannerPanel)
    assert len(panels) == 1
    panel = panels[0]
    qtbot.waitUntil(lambda: panel.plan is not None, timeout=180_000)
    assert panel.plan is not None and panel.plan.fits
    assert panel.slider.isEnabled()
    panel.close()


def test_the_engines_kept_state_is_its_own_named_part_not_compute() -> None:
    facts, calib = smollm()
    budget = Budget(ram=int(2 * GIB), gpu=0, unified=False, headroom=0, metric="resident", explain="test")
    p = plan([facts], budget, min_ctx=1024, target_ctx=2048, calibration=lambda f: calib, saves_kv=True)
    b = p.breakdown
    assert b.kept > 0  # a save arena and a restore's chunks
    seg = segments_of(p)
    assert seg["kept"] == b.kept and seg["runtime"] == b.output + b.runtime and sum(seg.values()) == p.need


def test_a_context_past_the_trained_one_is_allowed_with_a_visible_warning(qtbot: QtBot) -> None:
    p, calib = make_plan(ram_gib=2)
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.show_plan(p, calib)  # type: ignore[arg-type]
    trained = p.facts.context_length  # type: ignore[attr-defined]
    assert "Longer than" not in panel.ctx_label.text()
    assert panel.slider.maximum() * 256 > trained  # the slider goes past it
    panel.set_context(2 * trained)
    assert panel.current is not None and panel.current.config.n_ctx == 2 * trained
    text = panel.ctx_label.text()
    assert f"Longer than the {trained:,} tokens this model was trained on" in text
    assert "no rope scaling" in text  # SmolLM2's file declares none


def test_each_grid_cell_says_its_speed_when_the_speed_is_known(qtbot: QtBot) -> None:
    from hisho.core.planner.speed import Speed

    p, calib = make_plan(ram_gib=2)
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.show_plan(p, calib)  # type: ignore[arg-type]
    assert "tok/s" not in panel.grid.item(0, 0).text()  # no speed profile: memory only
    panel.show_plan(p, calib, Speed(decode_short=100.0, decode_4k=70.0, prompt=500.0, how="measured"))  # type: ignore[arg-type]
    speeds = [float(panel.grid.item(r, 0).text().split("~")[1].split()[0]) for r in range(panel.grid.rowCount())]
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) > 1  # a fuller context answers slower
    assert "speeds measured" in panel.grid_title.text()
