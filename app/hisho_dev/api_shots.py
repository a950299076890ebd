"""Settings → API's three tabs (Server, Connect a client, Requests) with the API on and two requests served, at
1280×720 and at 700 px, light and dark: ``python -m hisho_dev.api_shots OUT_DIR`` (also part of ``make
screenshots``).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import httpx

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import place, run_alone

SIZES = (("1280x720", 1280, 720), ("700px", 700, 600))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_shots(app: Any, window: Any, out: Path) -> None:
    """Write api-<theme>-<size>-<tab>.png."""
    from hisho.gui.settings.api_page import ApiPage, serving, stop_api
    from hisho.gui.settings.preferences import open_preferences

    prefs = open_preferences(window)
    page = next(p for p in (prefs.pages.widget(i) for i in range(prefs.pages.count())) if isinstance(p, ApiPage))
    prefs.nav.setCurrentRow(prefs.pages.indexOf(page))
    page.port.setValue(_free_port())
    page.enabled.setChecked(True)
    server = serving(window)
    assert server is not None
    body = {"model": server.backend.model_id, "max_tokens": 8, "temperature": 0, "messages": [
        {"role": "system", "content": "You are a careful assistant who answers in one sentence. " * 30},
        {"role": "user", "content": "Say hello."}]}
    for _ in range(2):   # the second one's system prompt comes from the cache
        with httpx.Client(timeout=300) as client:
            done = client.post(server.url + "/chat/completions", json=body,
                               headers={"Authorization": f"Bearer {page.key.text()}"})
        done.raise_for_status()
    try:
        for theme in ("light", "dark"):
            window.controller.set_theme(theme)
            for size, width, height in SIZES:
                place(window, width, height)
                for index, tab in enumerate(("server", "connect", "requests")):
                    page.tabs.setCurrentIndex(index)
                    wait_until(app, lambda: False, timeout=0.3)
                    window.grab().save(str(out / f"api-{theme}-{size}-{tab}.png"))
        window.controller.set_theme("system")
    finally:
        stop_api(window)


if __name__ == "__main__":
    raise SystemExit(run_alone(sys.argv[1:], api_shots, "api-*.png"))
