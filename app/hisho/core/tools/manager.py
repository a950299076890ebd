"""MCP servers running for the app: started on a thread of their own (one asyncio loop running the ``mcp`` SDK's
clients), their states, their tools, and calls from the app's sync threads. No Qt.

Rules of use:
- ``ToolManager(configs)`` starts nothing; ``start()`` starts every enabled server (it returns at once; pass
  ``wait`` to wait for them), ``stop()`` / ``close()`` end them. Any thread may call any method.
- ``states()`` says what each server is doing (``ServerState``: starting, ready with N tools, failed with the
  server's own message and the tail of its stderr, stopped); ``on_state`` hears each change on the manager's
  thread (the window moves it to its own).
- ``tools()`` lists the tools of ready servers. A tool's ``qualified`` name is what the model sees: its own
  name, or ``server__name`` where two servers offer the same name (both kept). ``set_enabled`` turns one off
  (remembered in the server's config by the caller: ``disabled_tools``).
- ``call(name, arguments, timeout, cancelled)`` runs one tool and returns a ``CallOutcome``, never raises for
  what the server did: a timeout, a crash, garbage on stdout or an MCP error is an outcome with ``error`` set.
  A server that failed a call that way is stopped and started again on its next call.
- ``test(name)`` starts a server's config apart, lists its tools and stops it: what a Test button shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import IO, Any

from hisho.core.tools.config import ServerConfig, with_token

log = logging.getLogger("hisho.tools")

STARTING, READY, FAILED, STOPPED = "starting", "ready", "failed", "stopped"
START_TIMEOUT_S = 30.0
STDERR_TAIL = 2000


@dataclass(frozen=True)
class ServerState:
    name: str
    status: str                 # starting, ready, failed, stopped
    tools: int = 0
    message: str = ""           # why it failed, in the server's (or the system's) own words
    stderr: str = ""            # the tail of what a local server wrote on stderr

    def describe(self) -> str:
        if self.status == READY:
            return f"{self.name}: ready, {self.tools} tool" + ("" if self.tools == 1 else "s")
        if self.status == FAILED:
            return f"{self.name}: failed — {self.message}"
        return f"{self.name}: {self.status}"


@dataclass(frozen=True)
class ToolInfo:
    server: str
    name: str                   # the server's own name for it
    qualified: str              # the name the model sees (unique across servers)
    description: str
    schema: dict[str, Any]
    enabled: bool = True

    def as_function(self) -> dict[str, Any]:
        """The tool as a chat template takes it (OpenAI's function shape)."""
        return {"type": "function", "function": {"name": self.qualified, "description": self.description,
                                                 "parameters": self.schema}}


@dataclass(frozen=True)
class CallOutcome:
    text: str
    error: bool = False


@dataclass
class _Conn:
    config: ServerConfig
    state: ServerState
    session: Any = None
    tools: list[Any] = field(default_factory=list)
    stop: asyncio.Event | None = None
    task: asyncio.Task[None] | None = None
    ready: asyncio.Event | None = None
    errlog: IO[str] | None = None
    garbage: list[str] = field(default_factory=list)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _message(exc: BaseException) -> str:
    subs = getattr(exc, "exceptions", None)   # an exception group (anyio's task groups raise them)
    if isinstance(subs, (list, tuple)) and subs and all(isinstance(e, BaseException) for e in subs):
        return "; ".join(_message(e) for e in subs)
    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    text = (str(exc) or type(exc).__name__).strip().splitlines()[0]
    return text if len(text) < 500 else text[:500] + "…"


class ToolManager:
    def __init__(self, configs: list[ServerConfig], *, on_state: Callable[[ServerState], None] | None = None,
                 start_timeout: float = START_TIMEOUT_S) -> None:
        self.on_state = on_state
        self.start_timeout = start_timeout
        self._lock = threading.Lock()
        self._conns: dict[str, _Conn] = {c.name: _Conn(c, ServerState(c.name, STOPPED)) for c in configs}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hisho-mcp", daemon=True)
        self._thread.start()
        self._closed = False

    # ----- any thread ---------------------------------------------------------------------------------------

    def _run(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def configs(self) -> list[ServerConfig]:
        with self._lock:
            return [c.config for c in self._conns.values()]

    def start(self, name: str | None = None, wait: float | None = None) -> None:
        """Start ``name`` (or every enabled server); with ``wait``, until each is ready or failed."""
        names = [name] if name is not None else [c.config.name for c in self._conns.values() if c.config.enabled]
        futures = [self._run(self._start(n)) for n in names]
        if wait is not None:
            for f in futures:
                with contextlib.suppress(FutureTimeout):
                    f.result(wait)

    def stop(self, name: str | None = None) -> None:
        names = [name] if name is not None else list(self._conns)
        for n in names:
            self._run(self._stop(n)).result(15)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def states(self) -> list[ServerState]:
        with self._lock:
            return [c.state for c in self._conns.values()]

    def state(self, name: str) -> ServerState:
        with self._lock:
            return self._conns[name].state

    def tools(self, enabled_only: bool = False) -> list[ToolInfo]:
        with self._lock:
            # A server that failed a call keeps its tools offered (the prompt stays the same): the next call
            # starts it again.
            listed = [(c.config, t) for c in self._conns.values() if c.config.enabled for t in c.tools]
        counts: dict[str, int] = {}
        for _cfg, t in listed:
            counts[t.name] = counts.get(t.name, 0) + 1
        out = []
        for cfg, t in listed:
            qualified = _safe(t.name) if counts[t.name] == 1 else f"{_safe(cfg.name)}__{_safe(t.name)}"
            enabled = t.name not in cfg.disabled_tools
            if enabled or not enabled_only:
                out.append(ToolInfo(cfg.name, t.name, qualified, t.description or "",
                                    dict(t.input_schema or {"type": "object", "properties": {}}), enabled))
        return out

    def schemas(self) -> list[dict[str, Any]]:
        """The enabled tools of ready servers, as a chat template takes them (stable order)."""
        return [t.as_function() for t in self.tools(enabled_only=True)]

    def set_enabled(self, qualified: str, enabled: bool) -> ServerConfig:
        """Turn a tool on or off; returns its server's changed config (the caller saves it)."""
        tool = next((t for t in self.tools() if t.qualified == qualified), None)
        if tool is None:
            raise KeyError(qualified)
        with self._lock:
            conn = self._conns[tool.server]
            off = set(conn.config.disabled_tools)
            (off.discard if enabled else off.add)(tool.name)
            conn.config = replace(conn.config, disabled_tools=tuple(sorted(off)))
            return conn.config

    def call(self, qualified: str, arguments: dict[str, Any], timeout: float = 60.0,
             cancelled: Callable[[], bool] = lambda: False) -> CallOutcome:
        tool = next((t for t in self.tools(enabled_only=True) if t.qualified == qualified), None)
        if tool is None:
            return CallOutcome(f"no tool named {qualified!r} is available", error=True)
        future = self._run(self._call(tool.server, tool.name, arguments, timeout))
        deadline = time.monotonic() + timeout + self.start_timeout + 5
        while True:
            try:
                return future.result(0.1)  # type: ignore[no-any-return]
            except FutureTimeout:
                if cancelled() or time.monotonic() > deadline:
                    future.cancel()
                    self._run(self._stop(tool.server))
                    return CallOutcome("the call was stopped" if cancelled() else
                                       f"{tool.server} did not answer within {timeout:g} s", error=True)

    def call_server(self, server: str, name: str, arguments: dict[str, Any], timeout: float = 60.0) -> CallOutcome:
        """A tool by its server and own name (a server not running is started first)."""
        return self._run(self._call(server, name, arguments, timeout)).result(  # type: ignore[no-any-return]
            timeout + self.start_timeout + 5)

    def test(self, config: ServerConfig, timeout: float = START_TIMEOUT_S) -> ServerState:
        """Start ``config`` apart from the running servers, list its tools, stop it: its state."""
        probe = ToolManager([config], start_timeout=timeout)
        try:
            probe.start(config.name, wait=timeout + 5)
            return probe.state(config.name)
        finally:
            probe.close()

    # ----- the manager's thread -----------------------------------------------------------------------------

    def _set(self, conn: _Conn, state: ServerState) -> None:
        with self._lock:
            conn.state = state
        log.info("MCP %s", state.describe())
        if self.on_state is not None:
            try:
                self.on_state(state)
            except Exception:
                log.exception("MCP state listener failed")

    def _stderr(self, conn: _Conn) -> str:
        if conn.errlog is None:
            return ""
        try:
            conn.errlog.flush()
            conn.errlog.seek(0)
            return conn.errlog.read()[-STDERR_TAIL:].strip()
        except (OSError, ValueError):
            return ""

    async def _start(self, name: str) -> None:
        conn = self._conns[name]
        if conn.task is not None and not conn.task.done():
            if conn.ready is not None:
                await conn.ready.wait()
            return
        conn.stop, conn.ready = asyncio.Event(), asyncio.Event()
        conn.garbage = []
        self._set(conn, ServerState(name, STARTING))
        conn.task = asyncio.create_task(self._serve(conn))
        await conn.ready.wait()

    async def _stop(self, name: str) -> None:
        conn = self._conns[name]
        if conn.stop is not None:
            conn.stop.set()
        if conn.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(conn.task), 10)
            if not conn.task.done():
                conn.task.cancel()
        conn.task = None
        if conn.state.status in (READY, STARTING):
            self._set(conn, ServerState(name, STOPPED))

    async def _transport(self, conn: _Conn, stack: contextlib.AsyncExitStack) -> Any:
        """The connection's read and write streams, entered into ``stack`` (its HTTP client too)."""
        cfg = with_token(conn.config)
        if cfg.remote:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = dict(cfg.headers)
            if cfg.token:
                headers["Authorization"] = f"Bearer {cfg.token}"
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)))
            return await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if conn.errlog is not None:
            conn.errlog.close()
        conn.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None,
                                       cwd=os.path.expanduser(cfg.cwd) if cfg.cwd else None,
                                       encoding_error_handler="replace")
        return await stack.enter_async_context(stdio_client(params, errlog=conn.errlog))

    async def _serve(self, conn: _Conn) -> None:
        from mcp.client.session import ClientSession

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):  # a line on stdout that is not JSON-RPC
                conn.garbage.append(_message(message))

        assert conn.stop is not None and conn.ready is not None
        name = conn.config.name
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._transport(conn, stack)
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=on_message))
                await asyncio.wait_for(session.initialize(), self.start_timeout)
                listed = await asyncio.wait_for(session.list_tools(), self.start_timeout)
                conn.session, conn.tools = session, list(listed.tools)
                self._set(conn, ServerState(name, READY, len(conn.tools), stderr=self._stderr(conn)))
                conn.ready.set()
                await conn.stop.wait()
        except asyncio.CancelledError:
            pass
        except BaseException as exc:
            message = "it did not answer in time" if isinstance(exc, TimeoutError) else _message(exc)
            if "Connection closed" in message:
                message = "the server exited before it answered"
            self._set(conn, ServerState(name, FAILED, message=message, stderr=self._stderr(conn)))
            log.debug("MCP server %s failed", name, exc_info=True)
        finally:
            conn.session = None
            if conn.state.status == READY:
                self._set(conn, ServerState(name, STOPPED))
            conn.ready.set()

    async def _call(self, server: str, name: str, arguments: dict[str, Any], timeout: float) -> CallOutcome:
        conn = self._conns[server]
        if conn.session is None or conn.state.status != READY:
            await self._start(server)   # a server stopped after a failed call starts again here
        session = conn.session
        if session is None:
            return CallOutcome(f"{server} is not running: {conn.state.message or conn.state.status}", error=True)
        before = len(conn.garbage)
        try:
            result = await asyncio.wait_for(session.call_tool(name, arguments), timeout)
        except TimeoutError:
            await self._stop(server)
            return CallOutcome(f"{server} did not answer within {timeout:g} s; it is restarted on the next call",
                               error=True)
        except Exception as exc:
            tail = self._stderr(conn)
            await self._stop(server)
            return CallOutcome(f"{server} failed during the call ({_message(exc)})"
                               + (f"; its last words: {tail[-300:]}" if tail else "")
                               + "; it is restarted on the next call", error=True)
        for _ in range(5):  # the SDK hands a bad line to the handler from a task of its own
            await asyncio.sleep(0)
        if len(conn.garbage) > before:
            bad = conn.garbage[before]
            await self._stop(server)
            return CallOutcome(f"{server} wrote something on its output that is not MCP ({bad}); the call is "
                               "failed and the server restarted on the next call", error=True)
        return CallOutcome(_text(result), error=bool(getattr(result, "is_error", False)))


def _text(result: Any) -> str:
    """A call result as plain text: its text blocks, other blocks named, structured content as JSON."""
    import json

    parts: list[str] = []
    for block in getattr(result, "content", []) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and getattr(getattr(block, "resource", None), "text", None) is not None:
            parts.append(str(block.resource.text))
        else:
            parts.append(f"[{kind or 'unknown'} content not shown]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
