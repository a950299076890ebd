"""``hisho bench tools --json``: the tool loop headless, through the chat service's own path, against a real MCP
server it starts (``hisho_dev.mcp_server`` over stdio; a source checkout), with calls approved automatically.

The chat: a system prompt and tool list of about 6K tokens (600 with ``--quick``), one user message, then a reply
that makes three tool calls (each step's grammar names the tool, as ``tool_choice`` does: a true-shape model's
random weights choose none) and answers. Per generation ``{"step", "prompt_tokens", "new_tokens",
"tokens_read"}``: ``new_tokens`` is the prompt less what the step before held (its prompt and its reply), what a
perfect cache reads; ``tokens_read`` what the engine read (the prompt less its cached tokens). ``read_ratio`` =
Σ tokens_read / Σ new_tokens (target ≤ 1.2), and ``read_ratio_after_first`` the same without the first step (the
loop's own cost: the call as the template writes it again, where the model's spacing differed).

The model: a true shape written with a Hermes ``<tool_call>`` template (``--model shape:NAME:QUANT``; default
``shape:llama-3.2-1b:Q4_0``, ``--quick`` ``shape:llama-tiny:Q8_0``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench.agent import model_file
from hisho.bench.homes import temporary_home
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.errors import UserError
from hisho.core.tools.approvals import allow_all
from hisho.core.tools.loop import ToolLoop
from hisho.core.tools.manager import READY, ToolManager

log = logging.getLogger("hisho.bench")

SIZES = {"full": {"system_words": 3600, "describe": 120, "n_ctx": 8192},
         "quick": {"system_words": 250, "describe": 10, "n_ctx": 2048}}
PLAN = ("add", "add", "add")   # the three calls (numbers: a call of bounded length from random weights)
_WORDS = ("You are a careful assistant for a small team. Read the files you are pointed at, add the figures they "
          "hold, say where each number came from and keep answers short and plain.").split()


def system_prompt(words: int) -> str:
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(words))


def steps(figures: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    rows: list[dict[str, Any]] = []
    held = 0
    for n, f in enumerate(figures):
        new = max(0, f["prompt_tokens"] - held)
        rows.append({"step": n, "prompt_tokens": f["prompt_tokens"], "new_tokens": new,
                     "tokens_read": f["prompt_tokens"] - f["cached_tokens"]})
        held = f["prompt_tokens"] + f["completion_tokens"]

    def ratio(rs: list[dict[str, Any]]) -> float:
        read = sum(int(r["tokens_read"]) for r in rs)
        return round(read / max(1, sum(int(r["new_tokens"]) for r in rs)), 3)

    return rows, {"read_ratio": ratio(rows), "read_ratio_after_first": ratio(rows[1:])}


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        from hisho_dev.mcp_server import stdio_config
    except ImportError:
        raise UserError("hisho bench tools runs from a source checkout: its MCP server (hisho_dev) is a developer "
                        "tool the installed app leaves out") from None
    quick = bool(getattr(args, "quick", False))
    size = SIZES["quick" if quick else "full"]
    path = model_file(getattr(args, "model", None), quick)
    started = time.monotonic()
    with temporary_home("hisho-bench-tools-"), tempfile.TemporaryDirectory() as root:
        (Path(root) / "figures.txt").write_text("north 12\nsouth 30\n", encoding="utf-8")
        manager = ToolManager([stdio_config("files", Path(root), "--describe", str(size["describe"]))])
        engine = EngineClient()
        try:
            manager.start(wait=60)
            state = manager.state("files")
            if state.status != READY:
                raise UserError(f"the MCP server did not start: {state.message} {state.stderr}")
            engine.load(LoadParams(model_path=str(path), n_ctx=int(size["n_ctx"])))
            service = ChatService(ConversationStore(Database()), engine)
            loop = ToolLoop(manager, allow_all)
            loop.forced = lambda made: PLAN[made] if made < len(PLAN) else None
            service.tools = loop
            n_tools = len(loop.schemas())
            conv = service.new_conversation()
            service.store.update(conv.id, system_prompt=system_prompt(int(size["system_words"])))
            turn = service.send(conv.id, "Add the two figures in figures.txt, then add 1 to the sum.")
            turn.sampling = dataclasses.replace(turn.sampling, max_tokens=64, seed=1)
            result = service.run(turn)
        finally:
            engine.close()
            manager.close()
    rows, ratios = steps(turn.steps)
    calls = [c for r in turn.rounds for c in r["calls"]]
    return {"model": path.name, "n_ctx": size["n_ctx"], "tools": n_tools,
            "calls": [{"name": c["name"], "status": c["status"]} for c in calls],
            "reply_status": result.message.status, "steps": rows, **ratios,
            "seconds": round(time.monotonic() - started, 1)}
