"""A load the memory plan refuses is offered as "Load anyway", which loads past the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from hisho.core.planner.gate import PlanRefused
from hisho.gui.shell import controller as controller_mod
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle


def _load_anyway_button(window: MainWindow) -> QPushButton | None:
    b = window.toast.action_button
    return b if window.toast.isVisible() and b.isVisible() and b.text() == "Load anyway" else None


def test_plan_refusal_offers_load_anyway(qtbot: QtBot, window: MainWindow, default_model_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    c = window.controller
    wait_idle(qtbot, window)
    real = controller_mod.load_params_for
    overrides: list[bool] = []

    def refusing(path: Path, **kw: Any) -> Any:
        overrides.append(bool(kw.get("override")))
        if not kw.get("override"):
            raise PlanRefused("the plan says 900 MiB do not fit a 100 MiB budget", plan=None)  # type: ignore[arg-type]
        return real(path, **kw)

    monkeypatch.setattr(controller_mod, "load_params_for", refusing)
    c.switch_model(str(default_model_path))
    wait_for(qtbot, lambda: _load_anyway_button(window) is not None)
    assert not c.model_ready
    assert "could not be loaded" in window.banner.text()
    button = _load_anyway_button(window)
    assert button is not None
    button.click()
    wait_for(qtbot, lambda: c.model_ready)
    assert overrides == [False, True]
