"""Every page of the window (Chats, Models, Memory planner, Settings, and the chat list over the chat) at
1280×720 and at 700 px, light and dark, for ``make screenshots``; and the check that every top-level window lies
within the screen (``outside_screen``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import place

log = logging.getLogger("hisho.bench")

SIZES = (("1280x720", 1280, 720), ("700px", 700, 600))
PAGES = ("chats", "models", "planner", "settings")


def outside_screen(app: Any) -> list[str]:
    """Visible top-level windows not wholly within their screen's available area."""
    out = []
    for top in app.topLevelWidgets():
        if top.isVisible() and top.isWindow():
            free = top.screen().availableGeometry()
            if not (free.contains(top.frameGeometry()) or free.contains(top.geometry())):
                out.append(f"{type(top).__name__} {top.windowTitle()!r} at {top.frameGeometry()} outside {free}")
    return out


def _planned(page: Any) -> bool:
    return bool(page.plans > 0)


def page_shots(app: Any, window: Any, out: Path) -> list[str]:
    """Write p-<theme>-<size>-<page>.png; returns the problems found (windows off screen)."""
    from hisho.gui.models.planner_page import PlannerPage

    problems: list[str] = []
    c = window.controller
    for theme_name in ("light", "dark"):
        c.set_theme(theme_name)
        for size, width, height in SIZES:
            place(window, width, height)
            wait_until(app, lambda: False, timeout=0.3)
            for name in PAGES:
                page = window.show_page(name)
                if isinstance(page, PlannerPage):
                    wait_until(app, functools.partial(_planned, page), timeout=120)
                wait_until(app, lambda: False, timeout=0.3)
                window.grab().save(str(out / f"p-{theme_name}-{size}-{name}.png"))
                problems += outside_screen(app)
            window.host.back()
            if size == "700px":
                window.toggle_sidebar()
                wait_until(app, lambda: False, timeout=0.3)
                window.grab().save(str(out / f"p-{theme_name}-{size}-chat-list.png"))
                window.toggle_sidebar()
    c.set_theme("system")
    for line in problems:
        log.error("screenshot: %s", line)
    return problems
