"""Waiting on the window from a script (the screenshot tools): run Qt's events until a condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(app: object, until: Callable[[], bool], timeout: float = 30.0) -> None:
    """Process events until ``until()`` or ``timeout`` seconds, then a few more rounds so the last change is
    painted before a grab."""
    from PySide6.QtWidgets import QApplication

    assert isinstance(app, QApplication)
    end = time.monotonic() + timeout
    while not until() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(20):
        app.processEvents()
