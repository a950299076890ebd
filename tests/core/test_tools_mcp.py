"""MCP servers through the SDK (hisho.core.tools): a real server written with the SDK's server API
(hisho_dev.mcp_server), once over stdio and once over streamable HTTP on loopback, both offering the same tools;
the manager's states, calls, failures, restarts, and the mcp.json shape read and written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.errors import UserError
from hisho.core.tools import config
from hisho.core.tools.config import ServerConfig
from hisho.core.tools.manager import FAILED, READY, ToolManager
from hisho_dev.mcp_server import http_server, stdio_config

TOOLS = {"read_file", "add", "slow", "hang", "crash", "big", "echo"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp-root")
    (root / "notes.txt").write_text("the meeting is on Tuesday\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def manager(folder: Path) -> Iterator[ToolManager]:
    with http_server(folder, "web") as url:
        m = ToolManager([stdio_config("files", folder), ServerConfig("web", url=url)])
        m.start(wait=60)
        yield m
        m.close()


def test_both_servers_are_ready_and_a_shared_name_is_kept_twice_qualified(manager: ToolManager) -> None:
    states = {s.name: s for s in manager.states()}
    assert states["files"].status == READY and states["files"].tools == len(TOOLS), states
    assert states["web"].status == READY and states["web"].tools == len(TOOLS), states
    assert "ready, 7 tools" in states["files"].describe()
    names = {t.qualified for t in manager.tools()}
    assert names == {f"{s}__{t}" for s in ("files", "web") for t in TOOLS}
    schema = next(t for t in manager.schemas() if t["function"]["name"] == "files__add")
    assert set(schema["function"]["parameters"]["properties"]) == {"a", "b"}


def test_calls_over_stdio_and_http(manager: ToolManager) -> None:
    assert manager.call("files__add", {"a": 2, "b": 3}).text == "5.0"
    assert manager.call("web__add", {"a": 2.5, "b": 1}).text == "3.5"
    read = manager.call("web__read_file", {"path": "notes.txt"})
    assert not read.error and "Tuesday" in read.text
    outside = manager.call("files__read_file", {"path": "../../etc/passwd"})
    assert outside.error and "outside the folder" in outside.text


def test_a_hanging_call_times_out_and_its_server_starts_again(manager: ToolManager) -> None:
    out = manager.call("files__hang", {}, timeout=1)
    assert out.error and "did not answer within 1 s" in out.text
    assert manager.call("files__add", {"a": 1, "b": 1}).text == "2.0"
    assert manager.state("files").status == READY


def test_a_crash_fails_the_call_with_the_servers_last_words_then_it_restarts(manager: ToolManager) -> None:
    out = manager.call("files__crash", {})
    assert out.error and "crash: exiting on purpose" in out.text and "restarted on the next call" in out.text
    assert manager.call("files__add", {"a": 4, "b": 4}).text == "8.0"


def test_disabled_tools_leave_the_list(manager: ToolManager) -> None:
    changed = manager.set_enabled("web__echo", False)
    try:
        assert changed.disabled_tools == ("echo",)
        assert "web__echo" not in {t["function"]["name"] for t in manager.schemas()}
        assert manager.call("web__echo", {"text": "x"}).error
    finally:
        manager.set_enabled("web__echo", True)


def test_garbage_on_stdout_fails_that_call(folder: Path) -> None:
    m = ToolManager([stdio_config("junk", folder, "--garbage")])
    try:
        m.start(wait=60)
        out = m.call("add", {"a": 1, "b": 2})   # one server: the names are its own
        assert out.error and "not MCP" in out.text
    finally:
        m.close()


def test_a_missing_command_and_a_server_that_exits_at_once_fail_with_their_reason(folder: Path) -> None:
    m = ToolManager([ServerConfig("nothing", command="/no/such/mcp-server"),
                     stdio_config("quitter", folder, "--exit-at-once")])
    try:
        m.start(wait=60)
        states = {s.name: s for s in m.states()}
        assert states["nothing"].status == FAILED and "not found" in states["nothing"].message
        assert states["quitter"].status == FAILED and "exited" in states["quitter"].message
        assert "refusing to start" in states["quitter"].stderr
        assert m.tools() == []
    finally:
        m.close()


def test_test_reports_a_config_apart(folder: Path) -> None:
    m = ToolManager([])
    try:
        state = m.test(stdio_config("probe", folder))
        assert state.status == READY and state.tools == len(TOOLS)
    finally:
        m.close()


# ----- mcp.json -------------------------------------------------------------------------------------------

CLAUDE_DESKTOP = {"mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]},
    "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}},
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer s3cret", "X-Team": "a"}},
}}


def test_an_mcp_json_file_imports_as_is_and_exports_back(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(CLAUDE_DESKTOP), encoding="utf-8")
    servers = config.import_file(path)
    assert [s.name for s in servers] == ["filesystem", "github", "remote"]
    remote = servers[2]
    assert remote.remote and remote.token == "s3cret" and remote.headers == {"X-Team": "a"}
    assert config.to_mcp_json(servers, secrets=True) == CLAUDE_DESKTOP
    shared = config.to_mcp_json(servers)
    assert "Authorization" not in shared["mcpServers"]["remote"]["headers"]


def test_the_app_keeps_tokens_apart_from_its_file() -> None:
    servers = config.parse_mcp_json(CLAUDE_DESKTOP)
    config.save_servers(servers)
    text = config.servers_file().read_text(encoding="utf-8")
    assert "s3cret" not in text and "ghp_x" in text   # env stays with its server (a private file)
    loaded = config.load_servers()
    assert loaded[2].token == "" and config.with_token(loaded[2]).token == "s3cret"
    assert config.servers_file().stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("bad, says", [
    ([], "one JSON object"),
    ({"mcpServers": {"x": {"args": []}}}, "needs either a command"),
    ({"mcpServers": {"x": {"command": "a", "url": "http://b"}}}, "needs either a command"),
    ({"mcpServers": {"x": {"url": "ftp://b"}}}, "http:// or https://"),
    ({"mcpServers": {"x": {"command": "a", "args": "-v"}}}, "args must be a list"),
    ({"mcpServers": {"bad/name": {"command": "a"}}}, "MCP server name"),
])
def test_a_bad_file_is_refused_with_the_entry_named(bad: object, says: str) -> None:
    with pytest.raises(UserError, match=says):
        config.parse_mcp_json(bad)


def test_always_is_remembered_with_the_settings_and_revocable(manager: ToolManager, tmp_path: Path) -> None:
    from hisho.core import settings as settings_mod
    from hisho.core.tools.approvals import allow_all
    from hisho.core.tools.loop import ToolLoop

    path = tmp_path / "settings.json"
    stored = settings_mod.Settings(path=path)
    stored.set("tool_calls_per_message", 4)
    stored.set("tool_timeout_s", 9)
    loop = ToolLoop.from_settings(stored, manager, allow_all)
    assert (loop.max_calls, loop.timeout) == (4, 9.0)
    loop.approvals.always("files/add")
    assert settings_mod.load(path).get("tools_always_allowed") == ["files/add"]
    again = ToolLoop.from_settings(settings_mod.load(path), manager, allow_all)
    assert again.approvals.allowed("files/add")
    again.approvals.revoke("files/add")
    assert settings_mod.load(path).get("tools_always_allowed") == []
    with pytest.raises(ValueError, match="tools_always_allowed"):
        stored.set("tools_always_allowed", "files/add")
