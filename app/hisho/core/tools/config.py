"""The user's MCP servers: what starts each one (a local command over stdio, or a remote streamable HTTP URL),
kept in ``config_dir()/mcp.json``, and the common ``mcp.json`` shape read and written as LM Studio, Jan and
Claude Desktop write it: ``{"mcpServers": {"name": {"command", "args", "env", "cwd"} | {"url", "headers"}}}``.
No Qt.

Rules of use:
- ``load_servers()`` never raises: an unreadable file gives an empty list and a log line. ``parse_mcp_json``
  raises ``UserError`` saying which entry is wrong; nothing is half-imported.
- A remote server's bearer token is stored like the remote engines' API keys (the OS keyring when one is
  usable, else a file only this user can read): an ``Authorization: Bearer …`` header of an imported file goes
  there, never into ``mcp.json``; ``with_token`` adds it back for a connection. ``export_mcp_json`` writes the
  token only when asked (``secrets=True``), so a shared file carries none by default.
- The file itself is written readable by this user only: a local server's ``env`` often holds a key.
- Hisho's own fields ride in the same entries (``"disabled": true``, ``"disabledTools": [...]``), as Claude
  Desktop and LM Studio add theirs; other programs ignore them.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hisho.core import paths, secrets
from hisho.core.atomic import write_private_text
from hisho.core.errors import UserError
from hisho.core.user_files import read_json

log = logging.getLogger("hisho.tools")

SERVICE = "hisho"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), never both."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    token: str = field(default="", repr=False, compare=False)   # only while connecting (``with_token``)
    enabled: bool = True
    disabled_tools: tuple[str, ...] = ()

    @property
    def remote(self) -> bool:
        return bool(self.url)

    def describe(self) -> str:
        return self.url if self.remote else " ".join([self.command, *self.args])


def check(cfg: ServerConfig) -> ServerConfig:
    """``cfg`` if it can be started; else ``UserError`` naming what is wrong."""
    if not _NAME.match(cfg.name):
        raise UserError(f"MCP server name {cfg.name!r}: use letters, digits, spaces, '.', '_' or '-' "
                        "(at most 64)")
    if bool(cfg.command) == bool(cfg.url):
        raise UserError(f"MCP server {cfg.name!r} needs either a command (a local server) or a url (a remote "
                        "one)")
    if cfg.url and not cfg.url.startswith(("http://", "https://")):
        raise UserError(f"MCP server {cfg.name!r}: the url must start with http:// or https://")
    return cfg


# ----- the common mcp.json shape ----------------------------------------------------------------------------

def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise UserError(f"{what} must be an object of strings")
    return {k: str(v) for k, v in value.items()}


def _entry(name: str, spec: Any) -> ServerConfig:
    where = f"mcpServers.{name}"
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be an object with a command or a url")
    args = spec.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise UserError(f"{where}.args must be a list of strings")
    headers = _strings(spec.get("headers"), f"{where}.headers")
    token = ""
    for key in list(headers):
        if key.lower() == "authorization" and headers[key].lower().startswith("bearer "):
            token = headers.pop(key)[len("bearer "):].strip()
    disabled = spec.get("disabledTools", [])
    if not isinstance(disabled, list) or not all(isinstance(t, str) for t in disabled):
        raise UserError(f"{where}.disabledTools must be a list of tool names")
    url = spec.get("url", spec.get("serverUrl", ""))
    cfg = ServerConfig(name=name, command=str(spec.get("command") or ""), args=tuple(str(a) for a in args),
                       env=_strings(spec.get("env"), f"{where}.env"), cwd=str(spec.get("cwd") or ""),
                       url=str(url or ""), headers=headers, token=token,
                       enabled=not bool(spec.get("disabled", False)), disabled_tools=tuple(disabled))
    return check(cfg)


def parse_mcp_json(data: Any) -> list[ServerConfig]:
    """The servers of an ``mcp.json`` document (``{"mcpServers": {...}}``; a bare ``{name: spec}`` object and
    VS Code's ``{"servers": {...}}`` are read too). Bearer tokens are in ``token``."""
    if not isinstance(data, dict):
        raise UserError("an mcp.json file holds one JSON object with \"mcpServers\"")
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None and data and all(isinstance(v, dict) and ("command" in v or "url" in v)
                                        for v in data.values()):
        servers = data
    if not isinstance(servers, dict):
        raise UserError("the file has no \"mcpServers\" object")
    return [_entry(str(name), spec) for name, spec in servers.items()]


def to_mcp_json(servers: list[ServerConfig], *, secrets: bool = False) -> dict[str, Any]:
    """The common shape of ``servers``; tokens written (as ``Authorization`` headers) only with ``secrets``."""
    out: dict[str, Any] = {}
    for s in servers:
        spec: dict[str, Any]
        if s.remote:
            headers = dict(s.headers)
            if secrets and s.token:
                headers["Authorization"] = f"Bearer {s.token}"
            spec = {"url": s.url, **({"headers": headers} if headers else {})}
        else:
            spec = {"command": s.command, "args": list(s.args), **({"env": dict(s.env)} if s.env else {})}
            if s.cwd:
                spec["cwd"] = s.cwd
        if not s.enabled:
            spec["disabled"] = True
        if s.disabled_tools:
            spec["disabledTools"] = list(s.disabled_tools)
        out[s.name] = spec
    return {"mcpServers": out}


def import_file(path: Path) -> list[ServerConfig]:
    data = read_json(path)
    return parse_mcp_json(data)


def export_file(servers: list[ServerConfig], path: Path, *, secrets: bool = False) -> Path:
    text = json.dumps(to_mcp_json(servers, secrets=secrets), indent=2, ensure_ascii=False)
    write_private_text(path, text + "\n")
    return path


# ----- where the app keeps them -------------------------------------------------------------------------------

def servers_file() -> Path:
    return paths.config_dir() / "mcp.json"


def load_servers(path: Path | None = None) -> list[ServerConfig]:
    """The configured servers (tokens not read: ``with_token``). Never raises."""
    path = path or servers_file()
    if not path.exists():
        return []
    try:
        return [replace(s, token="") for s in import_file(path)]
    except UserError as exc:
        log.warning("MCP servers file %s unreadable (%s); no servers", path, exc)
        return []


def save_servers(servers: list[ServerConfig], path: Path | None = None) -> None:
    """Write the servers (no tokens); a token a config carries is stored apart (``set_token``)."""
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise UserError("two MCP servers have the same name")
    for s in servers:
        check(s)
        if s.token:
            set_token(s.name, s.token)
    export_file(servers, path or servers_file(), secrets=False)


def merge(current: list[ServerConfig], imported: list[ServerConfig]) -> list[ServerConfig]:
    """``current`` with ``imported`` added; an imported server with a name already used replaces it."""
    names = {s.name for s in imported}
    return [s for s in current if s.name not in names] + imported


def _token_file(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return paths.config_dir() / "mcp-tokens" / safe


def get_token(name: str) -> str:
    return secrets.read(f"mcp:{name}", _token_file(name))


def set_token(name: str, token: str) -> str:
    """Store (or, empty, remove) a remote server's bearer token; returns where it went."""
    return secrets.write(f"mcp:{name}", token, _token_file(name))


def with_token(cfg: ServerConfig) -> ServerConfig:
    """``cfg`` carrying its stored token (for a connection; never keep it around longer)."""
    return cfg if cfg.token or not cfg.remote else replace(cfg, token=get_token(cfg.name))
