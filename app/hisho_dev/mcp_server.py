"""A small MCP server for the tool loop's tests and ``hisho bench tools``, written with the SDK's server API.

``python -m hisho_dev.mcp_server --root FOLDER [--name NAME] [--http PORT] [--garbage] [--exit-at-once]
[--describe N]``: stdio by default, or streamable HTTP on loopback port PORT (path ``/mcp``). Tools:

- ``read_file(path)``: a text file under ``--root`` (a path leaving it is refused);
- ``add(a, b)``: the sum of two numbers;
- ``slow(seconds)``: waits, then says so (a hanging tool, for timeouts);
- ``crash()``: the server process exits at once (a crashing server);
- ``big(megabytes)``: a text result of that size (the result bound);
- ``echo(text)``: the text back (what a result holding a chat template's markers looks like).

``--garbage``: every tool call first prints a line that is not JSON-RPC on stdout. ``--exit-at-once``: the
process writes a line on stderr and exits before speaking MCP. ``--describe N``: each tool's description gets N
words of documentation (a long tool list, for the bench).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

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
            raise ValueError(f"{path} is outside the folder this server reads")
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

    def big(megabytes: float) -> str:
        noise()
        return "x" * int(megabytes * 1024 * 1024)

    def echo(text: str) -> str:
        noise()
        return text

    docs = {"read_file": "Read a text file under the server's folder.", "add": "Add two numbers.",
            "slow": "Wait the given seconds, then answer.", "crash": "Make the server exit (a test of crashes).",
            "big": "Answer with a text of the given size in megabytes.", "echo": "Answer with the given text."}
    for fn in (read_file, add, slow, crash, big, echo):
        server.add_tool(fn, name=fn.__name__, description=docs[fn.__name__] + (" " + extra if extra else ""))
    return server


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
