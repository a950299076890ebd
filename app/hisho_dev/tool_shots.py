"""Settings → Tools (both tabs) with the test MCP server running, and a chat whose reply calls a tool (the question
waiting for the person, then the call done), at 1280×720 and at 700 px, light and dark:
``python -m hisho_dev.tool_shots OUT_DIR``.

The model is a true-shape tiny llama written with a Hermes ``<tool_call>`` template (random weights: the first
step's grammar names ``add``, as the tests do), so the reply's words around the call are noise.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import offscreen_1280x720, place

SIZES = (("1280x720", 1280, 720), ("700px", 700, 600))


def tool_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.core.conversations.store import ChatSettings
    from hisho.gui.settings.preferences import open_preferences

    tools = window.chat_tools
    wait_until(app, lambda: any(s.status == "ready" for s in tools.states.values()), timeout=120)
    prefs = open_preferences(window)
    prefs.show_section("Tools")
    page = prefs.tools_page
    page.list.setCurrentRow(0)
    for theme in ("light", "dark"):
        window.controller.set_theme(theme)
        for size, width, height in SIZES:
            place(window, width, height)
            for index, tab in enumerate(("servers", "tools")):
                page.tabs.setCurrentIndex(index)
                wait_until(app, lambda: False, timeout=0.3)
                window.grab().save(str(out / f"tools-{theme}-{size}-{tab}.png"))
    window.show_page("chats")
    loop = window.ctx.tools
    loop.forced = lambda made: "add" if made == 0 else None
    conv = window.ctx.store.create("Adding numbers", settings=ChatSettings(temperature=0.0, max_tokens=96))
    window.controller.refresh(conv.id)
    window.controller.select(conv.id)
    wait_until(app, lambda: window.controller.current is not None and window.controller.current.id == conv.id,
               timeout=30)
    window.controller.send("Add 2 and 3 with the tool, please.")
    wait_until(app, lambda: any(p.state == "waiting" for p in tools.pending.values()), timeout=120)
    wait_until(app, lambda: False, timeout=0.5)
    for theme in ("light", "dark"):
        window.controller.set_theme(theme)
        for size, width, height in SIZES:
            place(window, width, height)
            window.view.scroll_to_bottom()
            wait_until(app, lambda: False, timeout=0.3)
            window.grab().save(str(out / f"tools-{theme}-{size}-chat-asking.png"))
    key = next(k for k, p in tools.pending.items() if p.state == "waiting")
    tools.answer(key, "once")
    wait_until(app, lambda: window.controller.sending.active is None and not tools.pending
               and bool(window.ctx.store.branch(conv.id)[-1].tool_calls), timeout=120)
    wait_until(app, lambda: False, timeout=0.5)
    for theme in ("light", "dark"):
        window.controller.set_theme(theme)
        for size, width, height in SIZES:
            place(window, width, height)
            for w in window.view.widgets.values():
                block = w.extras.get("tools")
                for row in getattr(block, "rows", []):
                    if row.fold is not None and not row.result.isVisible():
                        row.toggle()
            window.view.scroll_to_bottom()
            wait_until(app, lambda: False, timeout=0.3)
            window.grab().save(str(out / f"tools-{theme}-{size}-chat-done.png"))
    window.controller.set_theme("system")


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    offscreen_1280x720()
    os.environ["HISHO_HOME"] = tempfile.mkdtemp(prefix="hisho-shots-")
    from hisho.bench.agent import TOOL_TEMPLATE
    from hisho.bench.shapes import model_file
    from hisho.core.tools import config as tool_config
    from hisho.gui.shell.app import application, open_window
    from hisho_dev.mcp_server import stdio_config

    root = Path(tempfile.mkdtemp(prefix="hisho-shots-files-"))
    tool_config.save_servers([stdio_config("files", root)])
    app = application()
    window = open_window(str(model_file("llama-tiny", "Q8_0", chat_template=TOOL_TEMPLATE)))
    window.resize(1280, 720)
    window.show()
    wait_until(app, lambda: window.controller.model_ready, timeout=600)
    tool_shots(app, window, out)
    window.close()
    sys.stdout.write(f"wrote {len(list(out.glob('tools-*.png')))} screenshots to {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
