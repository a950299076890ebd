"""The generated agent session ``hisho bench agent`` replays: a long system prompt, many tool schemas, and turns
of a user step, a forced tool call, a tool result and a short reply, written once in a protocol-neutral form and
rendered as each wire format's request body (chat completions, Responses, Messages). No I/O.

Everything is generated from a seed: the same session, word for word, for every server it is sent to, so each
server reads the same text. A distinct ``tag`` opens the system prompt of each protocol's session, so no
protocol's run finds another's prompt in a cache.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

# A coding agent's vocabulary: prose that tokenizes like a real system prompt (about 1.3 tokens a word).
_WORDS = (
    "the repository module function test build file change review commit branch error message parser value "
    "return request response server client cache config setting option path folder package import class method "
    "argument result state event queue thread process memory token context model prompt answer tool call schema "
    "field type string number list object check run write read open close start stop save load update delete "
    "always never before after when unless only each every first last next previous small large clear exact "
    "careful short long plain useful safe correct wrong missing empty full new old local remote public private"
).split()
_FILES = ["app/main.py", "app/util.py", "app/api.py", "tests/test_api.py", "README.md", "docs/guide.md",
          "app/models.py", "app/cli.py"]


def _prose(rng: random.Random, words: int) -> str:
    out: list[str] = []
    while len(out) < words:
        n = rng.randint(8, 18)
        sentence = [rng.choice(_WORDS) for _ in range(n)]
        sentence[0] = sentence[0].capitalize()
        out.extend(sentence)
        out[-1] += "."
    return " ".join(out[:words])


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass
class Session:
    """The neutral transcript: ``items`` are ("user", text), ("call", Call), ("result", call_id, text) and
    ("assistant", text), in order."""

    system: str
    tools: list[Tool]
    items: list[tuple[Any, ...]] = field(default_factory=list)

    def user(self, text: str) -> None:
        self.items.append(("user", text))

    def call(self, call: Call) -> None:
        self.items.append(("call", call))

    def result(self, call_id: str, text: str) -> None:
        self.items.append(("result", call_id, text))

    def assistant(self, text: str) -> None:
        self.items.append(("assistant", text))


@dataclass(frozen=True)
class Sizes:
    system_words: int     # prose in the system prompt
    tools: int            # tool schemas
    tool_words: int       # words in each tool's description
    turns: int            # turns before the restart (turn ``turns + 1`` comes after it)
    result_words: int     # words in each tool result
    call_tokens: int      # the limit on a call step's reply
    reply_tokens: int     # the limit on a reply step


# About 16K prompt tokens (system prompt and 24 tools) and 400-token tool results on SmolLM2's tokenizer.
FULL = Sizes(system_words=9000, tools=24, tool_words=110, turns=10, result_words=300, call_tokens=96,
             reply_tokens=16)
QUICK = Sizes(system_words=220, tools=3, tool_words=20, turns=2, result_words=30, call_tokens=96, reply_tokens=4)


def make_session(sizes: Sizes, tag: str, seed: int = 7) -> Session:
    rng = random.Random(seed)
    tools = []
    for k in range(sizes.tools):
        props = {
            "file": {"type": "string", "enum": _FILES, "description": _prose(rng, 12)},
            "mode": {"type": "string", "enum": ["quick", "full"], "description": _prose(rng, 8)},
        }
        tools.append(Tool(f"tool_{k:02d}_{rng.choice(_WORDS)}", _prose(rng, sizes.tool_words),
                          {"type": "object", "properties": props, "required": ["file", "mode"]}))
    system = f"Session {tag}. You are a coding agent working in a repository.\n\n" + _prose(rng, sizes.system_words)
    return Session(system, tools)


def user_text(turn: int) -> str:
    return f"Step {turn}: look at the next file with one of your tools, then say in a few words what you found."


def result_text(turn: int, sizes: Sizes) -> str:
    return f"Output of step {turn}:\n" + _prose(random.Random(1000 + turn), sizes.result_words)


# ----- the three wire formats ---------------------------------------------------------------------------------


def chat_body(s: Session, model: str, *, call: bool, max_tokens: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": s.system}]
    for item in s.items:
        if item[0] == "user":
            messages.append({"role": "user", "content": item[1]})
        elif item[0] == "call":
            c: Call = item[1]
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]})
        elif item[0] == "result":
            messages.append({"role": "tool", "tool_call_id": item[1], "content": item[2]})
        else:
            messages.append({"role": "assistant", "content": item[1]})
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": t.parameters}} for t in s.tools]
    return {"model": model, "messages": messages, "tools": tools, "tool_choice": "required" if call else "none",
            "max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def responses_body(s: Session, model: str, *, call: bool, max_tokens: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for item in s.items:
        if item[0] == "user":
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": item[1]}]})
        elif item[0] == "call":
            c: Call = item[1]
            items.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
        elif item[0] == "result":
            items.append({"type": "function_call_output", "call_id": item[1], "output": item[2]})
        else:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": item[1]}]})
    tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
             for t in s.tools]
    return {"model": model, "instructions": s.system, "input": items, "tools": tools,
            "tool_choice": "required" if call else "none", "max_output_tokens": max_tokens, "temperature": 0,
            "stream": True, "store": False}


def messages_body(s: Session, model: str, *, call: bool, max_tokens: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for item in s.items:
        if item[0] == "user":
            messages.append({"role": "user", "content": item[1]})
        elif item[0] == "call":
            c: Call = item[1]
            try:
                args = json.loads(c.arguments)
            except ValueError:
                args = {}
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": args if isinstance(args, dict) else {}}]})
        elif item[0] == "result":
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": item[1], "content": item[2]}]})
        else:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": item[1] or "."}]})
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in s.tools]
    return {"model": model, "system": s.system, "messages": messages, "tools": tools,
            "tool_choice": {"type": "any"} if call else {"type": "none"}, "max_tokens": max_tokens,
            "temperature": 0, "stream": True}


BODIES = {"chat": chat_body, "responses": responses_body, "messages": messages_body}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
