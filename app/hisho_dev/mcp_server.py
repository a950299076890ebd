"""A small MCP server for the tool loop's tests and ``hisho bench tools``, written with the SDK's server API.

``python -m hisho_dev.mcp_server --root FOLDER [--name NAME] [--http PORT] [--garbage] [--exit-at-once]
[--describe N]``: stdio by default, or streamable HTTP on loopback port PORT (path ``/mcp``). Tools:

- ``read_file(path)``: a text file under ``--root`` (a path leaving it is refused);
- ``add(a, b)``: the sum of two numbers;
- ``slow(seconds)``: waits, then says so; ``hang()``: never answers (a hanging tool, for timeouts);
- ``crash()``: the server process exits at once (a crashing server);
- ``big()``: a 20 MB text result (the result bound);
- ``echo(text)``: the text back (what a result holding a chat template's markers looks like).

``--garbage``: every tool call first prints a line that is not JSON-RPC on stdout. ``--exit-at-once``: the
process writes a line on stderr and exits before speaking MCP. ``--describe N``: each tool's description gets N
words of documentation (a long tool list, for the bench).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from hisho.core.tools.config import ServerConfig

_APP = str(Path(__file__).resolve().parent.parent)   # where hisho_dev is, for the child's PYTHONPATH

_WORDS = ("the tool reads its arguments checks each against the schema and answers with plain text that the "
          "model may quote or summarize for the person who asked").split()


def build(name: str, root: Path, *, garbage: bool = False, describe: int = 0) -> MCPServer:
    server: MCPServer = MCPServer(name)
    # The SDK's stdio server turns ``sys.stdout`` aside (to stderr) while it serves; garbage goes to the real
    # output, where a careless server's prints would land.
    real_stdout = os.dup(1) if garbage else -1
    extra = " ".join(_WORDS[i % len(_WORDS)] for i in range(describe))

    def noise() -> None:
        if garbage:
            os.write(real_stdout, b"this is not JSON-RPC\n")

    def read_file(path: str) -> str:
        noise()
        target = (root / path).resolve()
        if root.resolve() not in target.parents:
            raise ToolError(f"{path} is outside the folder this server reads")
        return target.read_text(encoding="utf-8")

    def add(a: float, b: float) -> float:
        noise()
        return a + b

    async def slow(seconds: float) -> str:
        noise()
        await asyncio.sleep(seconds)
        return f"waited {seconds} s"

    def crash() -> str:
        noise()
        sys.stderr.write("crash: exiting on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    async def hang() -> str:
        noise()
        await asyncio.sleep(3600)
        return "never"

    def big() -> str:
        noise()
        return "0123456789abcdef" * (20 * 1024 * 1024 // 16)

    def echo(text: str) -> str:
        noise()
        return text

    docs = {"read_file": "Read a text file under the server's folder.", "add": "Add two numbers.",
            "slow": "Wait the given seconds, then answer.", "crash": "Make the server exit (a test of crashes).",
            "hang": "Never answer (a test of time limits).", "big": "Answer with 20 MB of text.",
            "echo": "Answer with the given text."}
    for fn in (read_file, add, slow, hang, crash, big, echo):
        server.add_tool(fn, name=fn.__name__, description=docs[fn.__name__] + (" " + extra if extra else ""))
    return server


def stdio_config(name: str, root: Path, *flags: str) -> ServerConfig:
    """A local server config that starts this module over stdio (``flags``: ``--garbage`` and the like)."""
    return ServerConfig(name, command=sys.executable,
                        args=("-m", "hisho_dev.mcp_server", "--root", str(root), "--name", name, *flags),
                        env={"PYTHONPATH": _APP})


@contextmanager
def http_server(root: Path, name: str = "web", wait_s: float = 60.0) -> Iterator[str]:
    """This module serving streamable HTTP on a free loopback port; yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": _APP}
    proc = subprocess.Popen([sys.executable, "-m", "hisho_dev.mcp_server", "--root", str(root), "--name", name,
                             "--http", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the MCP test server did not start (exit {proc.poll()})") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hisho_dev.mcp_server")
    parser.add_argument("--root", default=".")
    parser.add_argument("--name", default="files")
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this loopback port")
    parser.add_argument("--garbage", action="store_true")
    parser.add_argument("--exit-at-once", action="store_true")
    parser.add_argument("--describe", type=int, default=0)
    args = parser.parse_args(argv)
    if args.exit_at_once:
        sys.stderr.write("mcp_server: refusing to start (--exit-at-once)\n")
        sys.exit(2)
    server = build(args.name, Path(args.root), garbage=args.garbage, describe=args.describe)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
