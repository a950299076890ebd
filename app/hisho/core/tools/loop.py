"""The tool loop: a chat reply that may call tools. No Qt.

``ToolLoop`` is what ``ChatService.tools`` holds; ``ChatService.run`` hands it a turn whose prompt carries tools.
Each step generates with the family's lazy grammar (``hisho.core.formats.tools``: the reply is free until the
call marker, then the call is well-formed), reads the calls with the API's parser, and for each call:

1. a tool that does not exist, or arguments that are not JSON or do not fit the tool's schema, is refused, and
   the reason goes back to the model as the tool's error;
2. the person approves (``Approve``: once, always for this tool, deny); a denial goes back as the result;
3. the call runs on its MCP server with a time limit (``timeout``, default 60 s; Stop ends it at once), and a
   result over ``max_result_chars`` is cut with a note;
4. the result is appended as a ``tool`` message — message content, which the engine never parses for control
   tokens — and the model continues from it.

The engine keeps the sequence's cells between steps, so each step reads only the new call and its result
(``Turn.steps`` has each generation's prompt and cached tokens). At most ``max_calls`` calls per reply; a reply
that asks for more stops and says so (``Turn.tool_error``). The calls and results are kept on the turn
(``Turn.rounds``) and saved with the reply as each round ends; ``Turn.text`` holds the text of the step in
progress (a round takes the text written before its calls), and ``on_text`` hears every step's text as it comes
(never a call's own markup).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from hisho.core.conversations import tool_rounds as rounds
from hisho.core.conversations.chat import MIN_REPLY_TOKENS, ChatService, PreparedPrompt, Turn
from hisho.core.engine.protocol import GenerationResult
from hisho.core.formats import tools as formats
from hisho.core.tools.approvals import ALWAYS, DENY, Approvals, Approve, CallRequest
from hisho.core.tools.manager import ToolInfo, ToolManager

log = logging.getLogger("hisho.tools")

MAX_CALLS = 10
TIMEOUT_S = 60.0
MAX_RESULT_CHARS = 32_000
NO_FORMAT = ("the model's chat template has no tool-call format Hisho reads (Hermes/Qwen <tool_call>, Llama 3.x "
             "JSON calls, Mistral [TOOL_CALLS], GPT-OSS harmony): it cannot call tools")


def unavailable(service: ChatService) -> str | None:
    """Why the model answering cannot call tools (None: it can)."""
    return NO_FORMAT if service.tool_family() is None else None


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… cut here: the result has {len(text):,} characters; the first {limit:,} are shown]"


class ToolLoop:
    def __init__(self, manager: ToolManager, approve: Approve, *, approvals: Approvals | None = None,
                 max_calls: int = MAX_CALLS, timeout: float = TIMEOUT_S,
                 max_result_chars: int = MAX_RESULT_CHARS) -> None:
        self.manager = manager
        self.approve = approve
        self.approvals = approvals or Approvals()
        self.max_calls = max_calls
        self.timeout = timeout
        self.max_result_chars = max_result_chars
        # A step's grammar: tests and the bench force calls with it (None: lazy, the model chooses).
        self.forced: Callable[[int], str | None] = lambda made: None

    @classmethod
    def from_settings(cls, settings: Any, manager: ToolManager, approve: Approve) -> ToolLoop:
        """The loop with the app's settings: its bounds, and "always" remembered in ``tools_always_allowed``."""
        def remember(keys: list[str]) -> None:
            settings.set("tools_always_allowed", keys)
            settings.save()

        approvals = Approvals(settings.get("tools_always_allowed"), on_change=remember)
        return cls(manager, approve, approvals=approvals, max_calls=int(settings.get("tool_calls_per_message")),
                   timeout=float(settings.get("tool_timeout_s")))

    def schemas(self) -> list[dict[str, Any]]:
        return self.manager.schemas()

    def reply(self, service: ChatService, turn: Turn, prompt: PreparedPrompt,
              on_text: Callable[[str], None] | None,
              on_reasoning: Callable[[str], None] | None) -> GenerationResult | None:
        family = service.tool_family()
        tools = prompt.tools or []
        assert family is not None
        messages = list(prompt.messages)
        tokens = prompt.tokens
        made = 0
        while True:
            forced = self.forced(made)
            chosen = [t for t in tools if forced in (None, t["function"]["name"])] or tools
            request = formats.grammar_for(family, chosen, required=forced is not None, parallel=forced is None)
            sampling = dataclasses.replace(
                turn.sampling, grammar=request.grammar, grammar_schemas=request.schemas, grammar_lazy=request.lazy,
                grammar_triggers=list(request.triggers), grammar_patterns=list(request.patterns))
            calls_in = formats.CallStream(family)

            def shown(ev: dict[str, Any], calls_in: formats.CallStream = calls_in) -> str:
                whole = getattr(turn._stream, "reasoning_kind", "") == "harmony"
                key = "piece" if (whole or "reasoning" not in ev) and ev.get("piece") is not None else "text"
                return calls_in.feed(str(ev.get(key, "")))

            turn.text = ""
            result = service.stream_step(turn, tokens, messages, sampling, on_text, on_reasoning, shown)
            tail, calls = calls_in.finish()
            if tail:
                turn.text += tail
                if on_text is not None:
                    on_text(tail)
            if result is not None:
                turn.steps.append({"prompt_tokens": result.prompt_tokens, "cached_tokens": result.cached_tokens,
                                   "completion_tokens": result.completion_tokens})
            if result is None or not calls or turn.cancelled or result.stop_reason == "cancelled":
                return result
            if made + len(calls) > self.max_calls:
                turn.tool_error = (f"stopped: the model asked for more than {self.max_calls} tool calls in one reply "
                                   "(Settings: tool calls per message)")
                over = [{"id": c.id, "name": c.name, "server": "", "tool": "", "arguments": c.arguments,
                         "status": rounds.REFUSED, "result": "Not run: the limit of tool calls per reply was reached."}
                        for c in calls]
                turn.rounds.append({"content": turn.text, "calls": over})
                turn.text = ""
                return result
            done = [self._call(call, turn) for call in calls]
            made += len(done)
            content, turn.text = turn.text, ""   # the round keeps it; the reply's text is what follows the calls
            turn.rounds.append({"content": content, "calls": done})
            self._save(service, turn)
            if turn.cancelled:
                turn.tool_error = "stopped while a tool ran"
                return result
            messages += rounds.call_messages(content, done)
            tokens = service.engine.tokenize(messages=messages, tools=tools, template_kwargs=turn.template_kwargs)
            if len(tokens) + MIN_REPLY_TOKENS > service.n_ctx > 0:
                turn.tool_error = "stopped: the tool results no longer leave room for a reply in the context"
                return result

    def _save(self, service: ChatService, turn: Turn) -> None:
        reply_id = turn.reply_id
        if reply_id is None or turn.store_error is not None:
            return
        text = json.dumps(turn.rounds, ensure_ascii=False)
        try:
            service.write(lambda: service.store.update_message(reply_id, tool_calls=text))
        except Exception as exc:  # the reply's own save reports a failing store
            log.warning("tool calls not saved yet: %s", exc)

    def _find(self, name: str) -> ToolInfo | None:
        return next((t for t in self.manager.tools(enabled_only=True) if t.qualified == name), None)

    def _call(self, call: formats.ToolCall, turn: Turn) -> dict[str, Any]:
        entry: dict[str, Any] = {"id": call.id, "name": call.name, "server": "", "tool": "",
                                 "arguments": call.arguments}

        def end(status: str, result: str) -> dict[str, Any]:
            log.info("tool call %s: %s", call.name, status)
            return {**entry, "status": status, "result": result}

        tool = self._find(call.name)
        if tool is None:
            names = ", ".join(t.qualified for t in self.manager.tools(enabled_only=True)) or "none"
            return end(rounds.REFUSED, f"Error: there is no tool named {call.name!r}; the tools are: {names}")
        entry.update(server=tool.server, tool=tool.name)
        try:
            arguments = json.loads(call.arguments or "{}", parse_float=_finite, parse_constant=_no_constant)
        except ValueError as exc:
            return end(rounds.REFUSED, f"Error: the arguments are not JSON ({exc})")
        problem = schema_problem(arguments, tool.schema)
        if problem:
            return end(rounds.REFUSED, f"Error: the arguments do not fit {call.name}'s schema: {problem}")
        request = CallRequest(call.name, tool.server, tool.name, arguments, turn.conversation_id)
        if not self.approvals.allowed(request.key):
            answer = self.approve(request)
            if answer == DENY and turn.cancelled:   # Stop while the person was asked
                return end(rounds.STOPPED, "The call was stopped before it ran.")
            if answer == DENY:
                return end(rounds.DENIED, "The person declined this call; it was not run.")
            if answer == ALWAYS:
                self.approvals.always(request.key)
        if turn.cancelled:
            return end(rounds.STOPPED, "The call was stopped before it ran.")
        began = time.monotonic()
        outcome = self.manager.call(call.name, arguments, self.timeout, cancelled=lambda: turn.cancelled)
        entry["seconds"] = round(time.monotonic() - began, 3)
        text = cut(outcome.text, self.max_result_chars)
        if outcome.error:
            return end(rounds.STOPPED if turn.cancelled else rounds.ERROR, f"Error: {text}")
        return end(rounds.OK, text)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number")


def schema_problem(arguments: Any, schema: dict[str, Any]) -> str:
    """Why ``arguments`` do not fit ``schema`` ('' when they do)."""
    import jsonschema

    if not isinstance(arguments, dict):
        return "they must be a JSON object"
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.exceptions.SchemaError as exc:
        log.info("a tool's schema is not valid JSON Schema (%s); its arguments are not checked", exc.message)
        return ""
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"
