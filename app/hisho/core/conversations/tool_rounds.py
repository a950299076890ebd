"""A reply's tool calls as stored (``Message.tool_calls``: JSON) and as the model sees them again. No I/O.

The stored form is a list of rounds, one per generation that called tools: ``{"content": text the model wrote
before its calls, "calls": [{"id", "name" (as the model called it), "server", "tool" (the server's own name),
"arguments" (JSON text), "status", "result", and "seconds" the call ran, when it ran}]}``; ``status`` is ``ok``, ``error`` (the tool or its server
failed), ``denied`` (the person said no), ``refused`` (no such tool, arguments that do not fit, the limit), or
``stopped``. The reply's ``content`` is what the model wrote after its last round.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("hisho.tools")

OK, ERROR, DENIED, REFUSED, STOPPED = "ok", "error", "denied", "refused", "stopped"


def load(text: str) -> list[dict[str, Any]]:
    """The rounds of a stored value ([] for none or a value this version cannot read)."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        log.warning("a reply's stored tool calls are unreadable; shown without them")
        return []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def call_messages(content: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One round as chat messages: the assistant's calls, then one ``tool`` message per result."""
    out: list[dict[str, Any]] = [{"role": "assistant", "content": content, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls]}]
    out += [{"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": c.get("result", "")}
            for c in calls]
    return out


def history(stored: str, calls_shown: bool) -> tuple[list[dict[str, Any]], str]:
    """The rounds of a stored reply for a later prompt: as calls and ``tool`` messages when the model's template
    writes them (``calls_shown``), else ``([], text)``: plain text the reply's content starts with."""
    rounds = load(stored)
    if calls_shown:
        return [m for r in rounds for m in call_messages(str(r.get("content", "")), list(r.get("calls", [])))], ""
    return [], as_text(rounds)


def as_text(rounds: list[dict[str, Any]]) -> str:
    """The rounds as readable text (Markdown export, a model without tool calls)."""
    lines: list[str] = []
    for r in rounds:
        if str(r.get("content", "")).strip():
            lines.append(str(r["content"]).strip())
        for c in r.get("calls", []):
            lines.append(f"[tool {c.get('name')}({c.get('arguments', '')}) — {c.get('status', '')}]")
            result = str(c.get("result", ""))
            if result:
                lines.append(result)
    return "\n".join(lines) + ("\n\n" if lines else "")
