"""Anthropic's Messages request read into the chat ``Job`` every wire format shares (``api.shapes``): the
template's messages (system, user, assistant with ``tool_calls`` and ``reasoning_content``, ``tool``), tools as
functions, ``tool_choice``, thinking, stop sequences, sampling. No I/O.

Rules of use: ``parse(body, defaults, max_default)`` for ``POST /v1/messages``, ``parse(..., count=True)`` for
``/v1/messages/count_tokens`` (no ``max_tokens``); both raise ``ApiError`` (400, the field named in the message
and in ``param``) for anything a client got wrong, never anything else. What the Messages API has and this
server cannot do (documents, image URLs, server tools, a prefilled assistant turn, MCP servers) is refused the same
way, never dropped.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hisho.api import tooling
from hisho.api.errors import ApiError
from hisho.api.images import base64_part
from hisho.api.shapes import Job
from hisho.api.tooling import Extras
from hisho.core.engine.protocol import Sampling

MAX_STOPS = 64
# Text blocks of one turn (and of ``system``) are joined with a blank line, as separate paragraphs.
JOIN = "\n\n"
# ``thinking.budget_tokens`` as a reasoning effort, for templates that take one (GPT-OSS): below 4,096 low,
# below 16,384 medium, else high. ``output_config.effort`` is read the same way.
EFFORTS = ((4096, "low"), (16384, "medium"))
EFFORT_NAMES = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _short(value: Any, n: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return repr(text if len(text) <= n else text[:n] + "…")


def _number(body: dict[str, Any], name: str, default: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, "must be a number")
    if not 0 <= value <= hi:
        raise _bad(name, f"must be between 0 and {hi:g}")
    return float(value)


def _integer(body: dict[str, Any], name: str, lo: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, "must be an integer")
    if value < lo:
        raise _bad(name, f"must be at least {lo}")
    return value


def parse(body: Any, defaults: dict[str, Any], max_default: int, *, count: bool = False) -> Job:
    """The ``Job`` of a Messages request (``count``: of a count_tokens request: no ``max_tokens``, no stream)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "is required (the model's id, GET /v1/models lists it)")
    max_tokens = _integer(body, "max_tokens", 1)
    if max_tokens is None and not count:
        raise _bad("max_tokens", "is required")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "must be true or false")
    if body.get("mcp_servers"):
        raise _bad("mcp_servers", "this server connects to no MCP servers; run the tools on the client")
    stops = _stops(body.get("stop_sequences"))
    top_k = _integer(body, "top_k", 0)
    sampling = Sampling(
        temperature=_number(body, "temperature", float(defaults.get("temperature", 0.7)), 1.0),
        top_p=_number(body, "top_p", float(defaults.get("top_p", 0.95)), 1.0),
        top_k=top_k if top_k is not None else int(defaults.get("top_k", 40)),
        repeat_penalty=1.0,
        # Anthropic's clients send their own models' output limits (Claude Code: 32,000): a reply longer than
        # the context stops where the context is full (stop_reason "max_tokens"), it is not refused.
        max_tokens=max_tokens or max_default,
        stop=list(stops),
    )
    extras = Extras()
    extras.tools = _tools(body.get("tools"))
    _tool_choice(body.get("tool_choice"), extras)
    _thinking(body.get("thinking"), max_tokens, extras)
    _output_config(body.get("output_config"), extras)
    hooks = body.get("hisho_test_hooks")
    if isinstance(hooks, dict) and os.environ.get("HISHO_ENGINE_TEST_HOOKS") == "1":
        extras.test_hooks = hooks
    messages = _system(body.get("system")) + _messages(body.get("messages"))
    return Job("chat", model, stream and not count, False, sampling, messages=messages, stops=stops,
               max_tokens_param="max_tokens", max_tokens_given=False, extras=extras, protocol="messages")


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise _bad("stop_sequences", "must be a list of non-empty strings")
    if len(value) > MAX_STOPS:
        raise _bad("stop_sequences", f"takes at most {MAX_STOPS} strings")
    return tuple(value)


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    if not isinstance(value, list):
        raise _bad("system", "must be a string or a list of text blocks")
    texts = []
    for j, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise _bad(f"system[{j}]", "must be a text block ({'type': 'text', 'text': …})")
        texts.append(block["text"])
    return [{"role": "system", "content": JOIN.join(texts)}] if texts else []


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(param, "must be a string or a list of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{param}[{j}]", "must be a content block with a 'type'")
    return content


def _unsupported(kind: str, param: str) -> ApiError:
    if kind == "image":
        return _bad(f"{param}.type", "'image' blocks are taken in a user message's content only, not in a "
                                     "tool result")
    if kind == "document":
        return _bad(f"{param}.type", "'document' blocks are not supported: the models this server runs read "
                                     "text; send the document's text in a text block")
    return _bad(f"{param}.type", f"{_short(kind)} is not a block type this server takes (text, tool_use, "
                                 "tool_result, thinking)")


def _text(block: dict[str, Any], param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _bad(f"{param}.text", "must be a string")
    return text


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "must be a non-empty list")
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # tool_use id -> tool name, from the turns so far
    for i, m in enumerate(value):
        param = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(param, "must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise _bad(f"{param}.role", f"{_short(role)} is not supported; use 'user' or 'assistant' (the system "
                                        "prompt goes in 'system')")
        blocks = _blocks(m.get("content"), f"{param}.content")
        if not blocks:
            raise _bad(f"{param}.content", "must not be empty")
        turn = _assistant(blocks, param, calls) if role == "assistant" else _user(blocks, param, calls)
        out.extend(turn)
    if value[-1].get("role") == "assistant":
        raise _bad(f"messages[{len(value) - 1}]", "the last message must be the user's: continuing an assistant "
                                                  "turn (prefill) is not supported here")
    return out


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An ``image`` block with ``source.type == "base64"`` as the engine's image part (checked: api/images.py);
    a URL source is refused (the server fetches nothing)."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "url":
        raise _bad(f"{where}.source", "image URLs are not fetched (fetching is off); send the image as "
                                      "{'type': 'base64', 'media_type': 'image/png', 'data': …}")
    if kind != "base64" or not isinstance(source, dict):
        raise _bad(f"{where}.source", "must be {'type': 'base64', 'media_type': …, 'data': …}")
    media = source.get("media_type")
    if not isinstance(media, str) or not media.startswith("image/"):
        raise _bad(f"{where}.source.media_type", "must be an image type (image/png, image/jpeg, image/webp)")
    return base64_part(source.get("data"), f"{where}.source.data", f"{where}.source.data")


def _user_turn(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A user turn: its text blocks joined as paragraphs, or, with an image, the list of text and image parts."""
    if any(p["type"] == "image" for p in parts):
        return {"role": "user", "content": parts}
    return {"role": "user", "content": JOIN.join(p["text"] for p in parts)}


def _user(blocks: list[dict[str, Any]], param: str, calls: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []   # text and image parts, in order
    for j, block in enumerate(blocks):
        where = f"{param}.content[{j}]"
        kind = block["type"]
        if kind == "text":
            texts.append({"type": "text", "text": _text(block, where)})
        elif kind == "image":
            texts.append(_image(block, where))
        elif kind == "tool_result":
            if texts:  # text before a result keeps its place
                out.append(_user_turn(texts))
                texts = []
            out.append(_tool_result(block, where, calls))
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            raise _bad(f"{where}.type", f"'{kind}' blocks belong in an assistant message")
        else:
            raise _unsupported(kind, where)
    if texts:
        out.append(_user_turn(texts))
    return out


def _tool_result(block: dict[str, Any], where: str, calls: dict[str, str]) -> dict[str, Any]:
    call = block.get("tool_use_id")
    if not isinstance(call, str) or not call:
        raise _bad(f"{where}.tool_use_id", "is required")
    if call not in calls:
        raise _bad(f"{where}.tool_use_id", f"{_short(call)} matches no tool_use block of an earlier assistant "
                                           "message")
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise _unsupported(str(kind), f"{where}.content[{k}]")
            parts.append(_text(part, f"{where}.content[{k}]"))
        text = JOIN.join(parts)
    else:
        raise _bad(f"{where}.content", "must be a string or a list of text blocks")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise _bad(f"{where}.is_error", "must be true or false")
    if is_error:  # the template has no field for it: the model reads it in the result
        text = f"Error: {text}"
    return {"role": "tool", "content": text, "tool_call_id": call, "name": calls[call]}


def _assistant(blocks: list[dict[str, Any]], param: str, calls: dict[str, str]) -> list[dict[str, Any]]:
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"{param}.content[{j}]"
        kind = block["type"]
        if kind == "text":
            texts.append(_text(block, where))
        elif kind == "thinking":
            thought = block.get("thinking")
            if not isinstance(thought, str):
                raise _bad(f"{where}.thinking", "must be a string")
            thoughts.append(thought)
        elif kind == "redacted_thinking":
            continue  # encrypted by another server for its own models: nothing here can read it
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(call_id, str) or not call_id:
                raise _bad(f"{where}.id", "is required")
            if not isinstance(name, str) or not name:
                raise _bad(f"{where}.name", "is required")
            if not isinstance(arguments, dict):
                raise _bad(f"{where}.input", "must be an object (the tool's arguments)")
            calls[call_id] = name
            tool_calls.append({"id": call_id, "type": "function",
                               "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
        elif kind == "tool_result":
            raise _bad(f"{where}.type", "'tool_result' blocks belong in a user message")
        else:
            raise _unsupported(kind, where)
    out: dict[str, Any] = {"role": "assistant", "content": JOIN.join(texts)}
    if thoughts:
        out["reasoning_content"] = "\n".join(thoughts)
    if tool_calls:
        out["tool_calls"] = tool_calls
    return [out]


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad("tools", "must be a list of tools")
    out, names = [], set()
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(param, "must be an object with 'name' and 'input_schema'")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _bad(f"{param}.type", f"{_short(kind)}: this server runs no server tools; send client tools "
                                        "(name, description, input_schema) and run them yourself")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"{param}.name", "is required")
        if name in names:
            raise _bad(f"{param}.name", f"{_short(name)} is given twice; tool names must be unique")
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"{param}.input_schema", "must be a JSON schema object")
        tooling.check_tool_parameters(schema, f"{param}.input_schema")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise _bad(f"{param}.description", "must be a string")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if description:
            function["description"] = description
        out.append({"type": "function", "function": function})
    return out or None


def _tool_choice(choice: Any, extras: Extras) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise _bad("tool_choice", "must be {'type': 'auto' | 'any' | 'tool' | 'none'} ('tool' with a 'name')")
    assert isinstance(choice, dict)
    disable = choice.get("disable_parallel_tool_use", False)
    if not isinstance(disable, bool):
        raise _bad("tool_choice.disable_parallel_tool_use", "must be true or false")
    extras.parallel = not disable
    names = [t["function"]["name"] for t in extras.tools or []]
    if kind in ("any", "tool") and not names:
        raise _bad("tool_choice", f"'{kind}' needs 'tools'")
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or name not in names:
            raise _bad("tool_choice.name", f"{_short(name)} is not a tool in 'tools'")
        extras.tool_choice, extras.forced = "function", name
    else:
        extras.tool_choice = {"auto": "auto", "any": "required", "none": "none"}[str(kind)]


def _effort(budget: int) -> str:
    return next((name for limit, name in EFFORTS if budget < limit), "high")


def _thinking(value: Any, max_tokens: int | None, extras: Extras) -> None:
    """``thinking``: on or off where the template has a switch; a budget as the effort of a template that takes
    one. Not given: off, as Anthropic's API has it (a model without a switch thinks anyway)."""
    if value is None:
        extras.thinking = False
        return
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "disabled":
        extras.thinking = False
    elif kind in ("adaptive", "between_tools"):
        extras.thinking = True
    elif kind == "enabled":
        assert isinstance(value, dict)
        budget = value.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1024:
            raise _bad("thinking.budget_tokens", "must be an integer of at least 1024")
        if max_tokens is not None and budget >= max_tokens:
            raise _bad("thinking.budget_tokens", f"must be less than max_tokens ({max_tokens})")
        extras.thinking, extras.reasoning_effort = True, _effort(budget)
    else:
        raise _bad("thinking", "must be {'type': 'enabled', 'budget_tokens': N}, {'type': 'disabled'} or "
                               "{'type': 'adaptive'}")


def _output_config(value: Any, extras: Extras) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise _bad("output_config", "must be an object")
    effort = value.get("effort")
    if effort is not None:
        if effort not in EFFORT_NAMES:
            raise _bad("output_config.effort", "must be 'low', 'medium', 'high', 'xhigh' or 'max'")
        extras.reasoning_effort = EFFORT_NAMES[effort]
    fmt = value.get("format")
    if fmt is not None:
        schema = fmt.get("schema") if isinstance(fmt, dict) and fmt.get("type") == "json_schema" else None
        if not isinstance(schema, dict):
            raise _bad("output_config.format", "must be {'type': 'json_schema', 'schema': {…}}")
        if extras.tools:
            raise _bad("output_config.format", "cannot be combined with 'tools' here: send one or the other")
        extras.json_output, extras.schema = True, schema
