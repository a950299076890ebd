"""MCP tools in the window: Settings → Tools shows a real stdio server (hisho_dev.mcp_server) ready with its tools
and imports an mcp.json; a chat on a true-shape model written with a Hermes ``<tool_call>`` template asks the
person about a call in the reply (Allow once runs it: the call row says done; Deny: denied), and the saved
reply shows its calls again.

Random weights choose no tool, so the first step's grammar names ``add`` (``ToolLoop.forced``, as in
tests/engine/test_tool_loop.py); reading the call, the approval, running it on the server, the rows, the store:
the path a real model's reply takes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from hisho.bench.agent import TOOL_TEMPLATE
from hisho.bench.shapes import model_file
from hisho.core.conversations import tool_rounds
from hisho.core.conversations.store import ChatSettings
from hisho.core.tools import config as tool_config
from hisho.gui.chat.tool_calls import CallRow, ToolCallsBlock
from hisho.gui.settings.preferences import open_preferences
from hisho.gui.settings.tools_page import ToolsPage
from hisho.gui.shell.app import open_window
from hisho.gui.shell.main_window import MainWindow
from hisho_dev.mcp_server import stdio_config
from tests.gui.conftest import wait_for, wait_idle

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def tool_window(qtbot: QtBot, tmp_path: Path) -> Iterator[MainWindow]:
    tool_config.save_servers([stdio_config("files", tmp_path)])   # configured: the window starts it
    w = open_window(str(model_file("llama-tiny", "Q8_0", chat_template=TOOL_TEMPLATE)))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_ready, timeout=300_000)
    wait_for(qtbot, lambda: "files" in w.chat_tools.states and w.chat_tools.states["files"].status == "ready")
    yield w
    w.close()


def test_the_tools_page_lists_a_running_server_and_imports_mcp_json(
        qtbot: QtBot, tool_window: MainWindow, tmp_path: Path) -> None:
    w = tool_window
    page = open_preferences(w).tools_page
    assert isinstance(page, ToolsPage)
    wait_for(qtbot, lambda: page.list.item(0).text().startswith("files — ready, "))
    switches = [page.tool_list.item(i) for i in range(page.tool_list.count())]
    assert "add" in [s.data(Qt.ItemDataRole.UserRole) for s in switches]
    assert all(s.checkState() == Qt.CheckState.Checked for s in switches)
    assert w.tools_button.text() == f"Tools · {len(switches)}"
    page.list.setCurrentRow(0)
    qtbot.mouseClick(page.test_btn, Qt.MouseButton.LeftButton)   # the form's server, started apart
    wait_for(qtbot, lambda: page.state.text() == f"Test of files: ready, {len(switches)} tools")

    other = tmp_path / "other"
    other.mkdir()
    doc = tool_config.to_mcp_json([stdio_config("notes", other)])
    doc["mcpServers"]["broken"] = {"command": str(tmp_path / "no-such-program")}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert page.import_path(path)
    ready = page.list.item(0).text().split(" — ")[1]
    wait_for(qtbot, lambda: [page.list.item(i).text() for i in range(3)] == [
        f"files — {ready}", f"notes — {ready}",
        f"broken — failed: the command was not found ({tmp_path / 'no-such-program'})"])
    page.list.setCurrentRow(2)
    assert page.state.text().startswith("broken: failed: the command was not found")
    assert [s.name for s in tool_config.load_servers()] == ["files", "notes", "broken"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"args": []}}}', encoding="utf-8")
    assert not page.import_path(bad)
    assert "needs either a command" in page.state.text()


def _rows(widget: object) -> list[CallRow]:
    extras = getattr(widget, "extras", {})
    block = extras.get("tools")
    return block.rows if isinstance(block, ToolCallsBlock) else []


def _ask_and_answer(qtbot: QtBot, w: MainWindow, cid: int, choice: str) -> CallRow:
    """Send a message, answer the call's question with ``choice``; the saved reply's call row."""
    before = {m.id for m in w.ctx.store.branch(cid)}
    w.controller.send("Add 2 and 3.")

    def asking() -> CallRow | None:
        rows = _rows(w.view.stream_widget)
        return rows[-1] if rows and rows[-1].buttons else None

    wait_for(qtbot, lambda: asking() is not None, 120_000)
    row = asking()
    assert row is not None and row.head.text().startswith("Tool add (files) · waiting for you")
    assert set(json.loads(row.args.text())) == {"a", "b"}
    assert row.args.textFormat() == Qt.TextFormat.PlainText
    if choice == "stop":
        w.controller.sending.stop_here()
    else:
        qtbot.mouseClick(row.buttons[choice], Qt.MouseButton.LeftButton)

    def saved() -> bool:
        branch = w.ctx.store.branch(cid)
        return branch[-1].id not in before and branch[-1].role == "assistant" and branch[-1].status != "streaming"

    wait_for(qtbot, saved, 120_000)
    wait_idle(qtbot, w)
    reply = w.ctx.store.branch(cid)[-1]
    wait_for(qtbot, lambda: reply.id in w.view.widgets and bool(_rows(w.view.widgets[reply.id])))
    rows = _rows(w.view.widgets[reply.id])
    assert len(rows) == 1
    stored = tool_rounds.load(reply.tool_calls)
    assert [c["name"] for r in stored for c in r["calls"]] == ["add"]
    return rows[0]


def test_a_call_in_the_chat_asks_the_person_and_shows_where_it_happened(
        qtbot: QtBot, tool_window: MainWindow) -> None:
    w = tool_window
    loop = w.ctx.tools
    assert loop is not None
    loop.forced = lambda made: "add" if made == 0 else None
    conv = w.ctx.store.create("Tools chat", settings=ChatSettings(temperature=0.0, max_tokens=96))
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)

    done = _ask_and_answer(qtbot, w, conv.id, "once")
    assert done.head.text().startswith("Tool add (files) · done · ")
    assert done.fold is not None
    qtbot.mouseClick(done.fold, Qt.MouseButton.LeftButton)
    assert done.result.isVisible() and done.result.text().strip()

    denied = _ask_and_answer(qtbot, w, conv.id, "deny")
    assert denied.head.text() == "Tool add (files) · denied"
    assert "declined" in denied.result.text()

    stopped = _ask_and_answer(qtbot, w, conv.id, "stop")   # Stop while the question waits ends the reply
    assert stopped.head.text() == "Tool add (files) · stopped"

    # Shown again from the store (Message.tool_calls), as after a restart.
    w.controller.select(conv.id)
    w.controller.reload()
    wait_for(qtbot, lambda: sum(len(_rows(x)) for x in w.view.widgets.values()) == 3)
