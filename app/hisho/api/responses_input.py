"""OpenAI's Responses API request, translated into the chat request every wire format shares: ``input`` items and
``instructions`` become the template's messages, the flat function ``tools``, ``tool_choice``, ``text.format``
and ``reasoning.effort`` become the chat fields ``shapes.parse_chat`` reads, so one parser makes the ``Job``
(one template rendering, one tool-call reading, one grammar). No I/O.

Rules of use: ``parse(body, previous, defaults, max_default)`` with ``previous`` the stored record that
``previous_response_id`` names (None without one); raises ``ApiError`` naming the Responses field for anything
a client got wrong. ``Request.rename`` turns an error that names a chat field into one naming the Responses
field (for errors raised later, by the backend).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hisho.api.errors import ApiError
from hisho.api.images import data_url_part, stored_parts
from hisho.api.shapes import Job, parse_chat

ROLES = ("user", "system", "developer", "assistant")
ITEMS = ("message", "function_call", "function_call_output", "reasoning")
TEXT_PARTS = ("input_text", "output_text")
NO_FILES = "this server takes no files or audio; send text parts ('input_text') and images ('input_image')"
# Chat fields an error may name -> the Responses field the client sent.
RENAMED = {"max_tokens": "max_output_tokens", "response_format": "text.format", "reasoning_effort": "reasoning.effort",
           "messages": "input"}
# Fields whose feature this server does not have: refused (never ignored) when given a value that asks for it.
REFUSED = {"background": "background responses are not supported; send the request without 'background'",
           "conversation": "conversations are not supported; continue with 'previous_response_id' instead",
           "prompt": "prompt templates are not supported; send 'instructions' and 'input'",
           "max_tool_calls": "'max_tool_calls' is not supported; send the request without it"}


def _bad(message: str, param: str, code: str | None = None, status: int = 400) -> ApiError:
    return ApiError(status, message, param=param, code=code)


@dataclass
class Request:
    """A parsed Responses request: the job the engine runs and what the response echoes back."""

    job: Job
    history: list[dict[str, Any]]         # the conversation without ``instructions`` (what ``store`` keeps)
    instructions: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)   # as given (the flat shape), echoed back
    tool_choice: Any = "auto"
    parallel: bool = True
    text_format: dict[str, Any] = field(default_factory=lambda: {"type": "text"})
    effort: str | None = None
    summary: str | None = None
    max_output_tokens: int | None = None
    store: bool = True
    previous_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    encrypted_reasoning: bool = False     # include: reasoning.encrypted_content

    def rename(self, exc: ApiError) -> ApiError:
        """``exc`` naming the Responses field where it names a chat one."""
        return rename(exc, self.job.extras.schema is not None and not self.tools)


def rename(exc: ApiError, schema: bool) -> ApiError:
    """``exc`` naming the Responses field where it names a chat one (``schema``: the JSON schema the engine may
    have refused is ``text.format``'s, else a tool's)."""
    param = exc.param or ""
    if exc.message.startswith("the JSON schema cannot be turned into a grammar"):  # the engine's words
        param = "text.format" if schema else "tools"
    for chat, responses in (("response_format.json_schema.schema", "text.format.schema"),
                            ("response_format", "text.format")):
        if param == chat or param.startswith(chat + "."):   # a schema keyword's path, the chat check's words
            param = responses + param[len(chat):]
            exc.message = exc.message.replace(chat, responses)
            break
    tool = re.match(r"tools\[(\d+)\]\.function\.parameters", param)
    if tool:   # Responses' tools are flat: tools[i].parameters
        param = f"tools[{tool.group(1)}].parameters" + param[tool.end():]
        exc.message = exc.message.replace(tool.group(0), f"tools[{tool.group(1)}].parameters")
    name = param.split("[")[0]
    if name in RENAMED:
        param = RENAMED[name]
        exc.message = exc.message.replace(f"'{name}'", f"'{param}'")
    exc.param = param or None
    return exc


def previous_id(body: Any) -> str | None:
    """``previous_response_id`` (the route loads that record before ``parse``)."""
    value = body.get("previous_response_id") if isinstance(body, dict) else None
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad("'previous_response_id' must be a response id", "previous_response_id")
    return value


def parse(body: Any, previous: dict[str, Any] | None, defaults: dict[str, Any], max_default: int) -> Request:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", "body")
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False):
            raise _bad(why, name, "unsupported_parameter")
    if body.get("top_logprobs"):
        raise _bad("log probabilities are not supported; send 'top_logprobs' 0 or leave it out", "top_logprobs",
                   "unsupported_parameter")
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        raise _bad("'include' must be a list of strings", "include")
    if "message.output_text.logprobs" in include:
        raise _bad("log probabilities are not supported; leave 'message.output_text.logprobs' out of 'include'",
                   "include", "unsupported_parameter")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string", "instructions")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise _bad("'store' must be true or false", "store")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _bad("'metadata' must be an object", "metadata")
    max_output = body.get("max_output_tokens")
    if max_output is not None and (isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 1):
        raise _bad("'max_output_tokens' must be an integer of at least 1", "max_output_tokens")

    history = [{**m, "content": stored_parts(m.get("content"))} for m in (previous or {}).get("messages") or []]
    history += _input(body.get("input"), _call_ids(history))
    system = [{"role": "system", "content": instructions}] if instructions else []
    tools = _tools(body.get("tools"))
    chat: dict[str, Any] = {
        "model": body.get("model"), "stream": _given(body, "stream", False), "messages": system + history,
        "temperature": body.get("temperature"), "top_p": body.get("top_p"), "max_tokens": max_output,
        "tools": [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters", "strict")
                                                    if t.get(k) is not None}} for t in tools] or None,
        "tool_choice": _tool_choice(body.get("tool_choice")), "parallel_tool_calls": _given(body, "parallel_tool_calls", True),
        "response_format": _text_format(body.get("text")), "hisho_test_hooks": body.get("hisho_test_hooks"),
    }
    reasoning = body.get("reasoning") or {}
    if not isinstance(reasoning, dict):
        raise _bad("'reasoning' must be an object", "reasoning")
    chat["reasoning_effort"] = reasoning.get("effort")
    try:
        job = parse_chat(chat, defaults, max_default)
    except ApiError as exc:
        raise rename(exc, chat["response_format"] is not None) from None
    job.max_tokens_param = "max_output_tokens"
    job.protocol = "responses"
    assert job.messages is not None
    return Request(job, job.messages[len(system):], instructions=instructions, tools=tools, tool_choice=body.get("tool_choice") or "auto",
                   parallel=job.extras.parallel, text_format=(body.get("text") or {}).get("format") or {"type": "text"},
                   effort=reasoning.get("effort"), summary=reasoning.get("summary"), max_output_tokens=max_output,
                   store=store, previous_id=previous_id(body), metadata=metadata,
                   encrypted_reasoning="reasoning.encrypted_content" in include)


def _given(body: dict[str, Any], name: str, default: Any) -> Any:
    """``body[name]``, ``default`` where it is missing or null (clients send null for "not set")."""
    value = body.get(name)
    return default if value is None else value


def _call_ids(messages: list[dict[str, Any]]) -> set[str]:
    return {c["id"] for m in messages for c in m.get("tool_calls") or []}


def _input(items: Any, calls: set[str]) -> list[dict[str, Any]]:
    """``input`` as chat messages (the shapes ``parse_chat`` takes). Consecutive reasoning, assistant message and
    function_call items are one assistant turn, as the model wrote them."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise _bad("'input' must be a string or a non-empty list of items", "input")
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None   # the assistant turn that items may still add to
    for k, item in enumerate(items):
        param = f"input[{k}]"
        if not isinstance(item, dict):
            raise _bad(f"{param} must be an object", param)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise _bad(f"{param}.role must be one of {', '.join(ROLES)}", f"{param}.role", "invalid_value")
            if role != "assistant":
                out.append({"role": role, "content": _content(item.get("content"), f"{param}.content")})
                turn = None
                continue
            text = _text(item.get("content"), f"{param}.content")
            if turn is not None and not turn["content"] and "tool_calls" not in turn:
                turn["content"] = text   # the answer after its reasoning
            else:
                turn = {"role": "assistant", "content": text}
                out.append(turn)
        elif kind == "reasoning":
            turn = {"role": "assistant", "content": "", "reasoning_content": _reasoning(item, param)}
            out.append(turn)
        elif kind == "function_call":
            call = _function_call(item, param)
            calls.add(call["id"])
            if turn is None:
                turn = {"role": "assistant", "content": ""}
                out.append(turn)
            turn.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or call_id not in calls:
                raise _bad(f"{param}.call_id: no function_call with call_id {call_id!r} comes before it (in 'input' or "
                           "the response 'previous_response_id' names)", f"{param}.call_id")
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{param}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            turn = None
        else:
            raise _bad(f"{param}.type: {str(kind)[:40]!r} is not supported; use one of {', '.join(ITEMS)}",
                       f"{param}.type", "invalid_value")
    return out


def _content(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A user (system, developer) message's content: its text, or with ``input_image`` parts (data URLs, checked
    as the chat route checks them: api/images.py) the list of text and image parts."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == "input_image"
                                                for p in content):
        return _text(content, param)
    parts: list[dict[str, Any]] = []
    for n, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "input_image":
            if part.get("file_id") is not None and part.get("image_url") is None:
                raise _bad(f"{param}[{n}]: file ids are not supported (this server stores no files); send the image "
                           "as a data: URL in 'image_url'", f"{param}[{n}].file_id", "unsupported_content")
            parts.append(data_url_part(part.get("image_url"), f"{param}[{n}].image_url", f"{param}[{n}].image_url"))
        else:
            parts.append({"type": "text", "text": _text([part], f"{param}[{n}]")})
    return parts


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{param} must be a string or a list of text parts", param)
    texts = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image":
            raise _bad(f"{param}[{n}]: images go in user messages only", f"{param}[{n}].type", "unsupported_content")
        if kind in ("input_file", "input_audio"):
            raise _bad(f"{param}[{n}]: {NO_FILES}", f"{param}[{n}].type", "unsupported_content")
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise _bad(f"{param}[{n}] must be a text part ('input_text' or 'output_text' with 'text')",
                       f"{param}[{n}].type", "invalid_value")
    return "".join(texts)


def _reasoning(item: dict[str, Any], param: str) -> str:
    """A reasoning item's text: its ``reasoning_text`` content, else what this server put in ``encrypted_content``,
    else its summary."""
    for key in ("content", "summary"):
        parts = item.get(key) or []
        if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
            raise _bad(f"{param}.{key} must be a list of text parts", f"{param}.{key}")
        if parts:
            return "".join(p["text"] for p in parts)
        if key == "content" and isinstance(item.get("encrypted_content"), str):
            return str(item["encrypted_content"])
    return ""


def _function_call(item: dict[str, Any], param: str) -> dict[str, Any]:
    name, call_id, arguments = item.get("name"), item.get("call_id"), item.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise _bad(f"{param}.name is required", f"{param}.name")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{param}.call_id is required", f"{param}.call_id")
    if not isinstance(arguments, str):
        raise _bad(f"{param}.arguments must be a string of JSON", f"{param}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise _bad("'tools' must be a list of function tools", "tools")
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _bad(f"tools[{i}].type: only function tools are supported (this server has no hosted tools), not "
                       f"{str(kind)[:40]!r}", f"tools[{i}].type", "invalid_value")
        if not isinstance(tool.get("name"), str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", tool["name"]):
            raise _bad(f"tools[{i}].name is required: letters, digits, '_', '-', '.' or ':'", f"tools[{i}].name")
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise _bad(f"tools[{i}].parameters must be a JSON schema object", f"tools[{i}].parameters")
    return tools


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': …}", "tool_choice",
               "invalid_value")


def _text_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("'text' must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("'text.format.schema' must be a JSON schema object", "text.format.schema")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "output", "schema": fmt["schema"],
                                                       "strict": fmt.get("strict")}}
    raise _bad("'text.format.type' must be 'text', 'json_object' or 'json_schema'", "text.format.type",
               "invalid_value")
