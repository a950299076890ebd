"""Tool calls and structured output in the chat API: the request fields (``tools``, ``tool_choice``,
``parallel_tool_calls``, ``response_format``, ``chat_template_kwargs``, tool messages and assistant tool calls
in the history), the grammar a request's sampling gets, and the tool-call parts of responses. No I/O.

Rules of use: ``parse_message`` / ``parse_extras`` run inside ``shapes.parse_chat`` and raise ``ApiError``
for anything a client got wrong. ``apply(extras, sampling, load_info)`` runs once the model is known (its chat template
decides the family): it refuses tools the template cannot carry (400, never a silent ignore) and puts the
grammar into the job's sampling. The reply's raw text is read with ``hisho.core.formats.tools``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from hisho.api.errors import ApiError
from hisho.core.engine.protocol import Sampling
from hisho.core.formats import schema as schema_rules
from hisho.core.formats import tools as formats

NO_TOOLS = ("the model's chat template has no tool-call format this server reads (Hermes/Qwen <tool_call>, "
            "Llama 3.x JSON calls, Mistral [TOOL_CALLS], GPT-OSS harmony); send the request without 'tools'")


@dataclass
class Extras:
    """What a chat request asks beyond text (defaults: nothing)."""

    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"           # "auto", "none", "required" or "function" (then ``forced``)
    forced: str | None = None           # the function a named tool_choice calls
    parallel: bool = True
    schema: dict[str, Any] | None = None  # response_format: the JSON schema (json_object: any object)
    json_output: bool = False           # response_format json_object or json_schema
    template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None   # OpenAI's reasoning_effort: the template's, where it takes one
    thinking: bool | None = None          # think or not (Anthropic's ``thinking``): the template's toggle, if any
    test_hooks: dict[str, Any] | None = None  # only with the engine's test hooks on (HISHO_ENGINE_TEST_HOOKS=1)
    family: str | None = None           # set by ``apply``: the family whose calls the reply is read for

    @property
    def schema_param(self) -> str | None:
        """The field a schema the engine cannot take came in (None: the request has no schema)."""
        if self.schema is not None and not self.tools:
            return "response_format.json_schema.schema"
        return "tools" if self.tools else "response_format" if self.json_output else None

    @property
    def single_call(self) -> bool:
        """One call at most: a named ``tool_choice`` forces exactly one, ``parallel_tool_calls`` false allows one."""
        return self.forced is not None or not self.parallel


def _bad(message: str, param: str, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def parse_extras(body: dict[str, Any]) -> Extras:
    extras = Extras()
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("'tools' must be a list of functions", "tools")
        extras.tools = [_tool(t, i) for i, t in enumerate(tools)] or None
    _tool_choice(body.get("tool_choice"), extras)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise _bad("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    extras.parallel = parallel
    _response_format(body.get("response_format"), extras)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise _bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    extras.template_kwargs = kwargs or None
    effort = body.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise _bad("'reasoning_effort' must be a string such as \"low\", \"medium\" or \"high\"",
                   "reasoning_effort")
    extras.reasoning_effort = effort
    hooks = body.get("hisho_test_hooks")
    if isinstance(hooks, dict) and os.environ.get("HISHO_ENGINE_TEST_HOOKS") == "1":
        extras.test_hooks = hooks
    return extras


def _tool(tool: Any, i: int) -> dict[str, Any]:
    param = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise _bad(f"{param} must be {{'type': 'function', 'function': {{...}}}}", param)
    function = tool["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{param}.function.name is required", param)
    params = function.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise _bad(f"{param}.function.parameters must be a JSON schema object", f"{param}.function.parameters")
    if params is not None:  # what the grammar cannot enforce is the client's to check (the model still reads it)
        _check_schema(params, f"{param}.function.parameters", hints=True)
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _tool_choice(choice: Any, extras: Extras) -> None:
    if choice is None:
        return
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        extras.tool_choice = choice
    elif isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        extras.tool_choice, extras.forced = "function", choice["function"]["name"]
    else:
        raise _bad("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                   "{'name': …}}", "tool_choice", "invalid_value")
    if extras.tool_choice != "auto" and extras.tool_choice != "none" and not extras.tools:
        raise _bad("'tool_choice' needs 'tools'", "tool_choice")
    names = [t["function"]["name"] for t in extras.tools or []]
    if extras.forced is not None and extras.forced not in names:
        raise _bad(f"'tool_choice' names {extras.forced!r}, which is not in 'tools'", "tool_choice",
                   "invalid_value")


def _response_format(fmt: Any, extras: Extras) -> None:
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return
    if kind == "json_object":
        extras.json_output = True
        return
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise _bad("'response_format.json_schema.schema' must be a JSON schema object",
                       "response_format.json_schema.schema")
        _check_schema(schema, "response_format.json_schema.schema")
        extras.json_output, extras.schema = True, schema
        return
    raise _bad("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format",
               "invalid_value")


def check_tool_parameters(schema: dict[str, Any], param: str) -> None:
    """A tool's parameters as every wire format checks them (``param``: where the client gave them): refused only
    when malformed; what the grammar cannot enforce is the client's to check."""
    _check_schema(schema, param, hints=True)


def _check_schema(schema: dict[str, Any], param: str, hints: bool = False) -> None:
    """A keyword the grammar would not enforce is refused, naming where it is (``hisho.core.formats.schema``);
    ``hints``: a tool's parameters, where only a malformed schema is refused."""
    try:
        schema_rules.check(schema, param, hints=hints)
    except schema_rules.SchemaProblem as exc:
        raise _bad(f"{exc.param}: {exc.message}", exc.param, "invalid_schema") from None


def parse_message(m: dict[str, Any], i: int, role: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    """A history message as the template gets it: assistant tool calls (arguments as JSON text), a tool
    message's ``tool_call_id``, a ``name``, an assistant turn's ``reasoning_content``."""
    out: dict[str, Any] = {"role": role, "content": content}
    if role == "tool":
        call = m.get("tool_call_id")
        if not isinstance(call, str) or not call:
            raise _bad(f"messages[{i}].tool_call_id is required in a tool message", f"messages[{i}].tool_call_id")
        out["tool_call_id"] = call
    for key in ("name", "reasoning_content"):  # templates that show earlier reasoning read the latter
        if isinstance(m.get(key), str):
            out[key] = m[key]
    calls = m.get("tool_calls")
    if role == "assistant" and calls:
        if not isinstance(calls, list):
            raise _bad(f"messages[{i}].tool_calls must be a list", f"messages[{i}].tool_calls")
        out["tool_calls"] = [_history_call(c, i, k) for k, c in enumerate(calls)]
    return out


def _history_call(call: Any, i: int, k: int) -> dict[str, Any]:
    param = f"messages[{i}].tool_calls[{k}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _bad(f"{param} needs a function with a name", param)
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": str(call.get("id") or ""), "type": "function",
            "function": {"name": function["name"], "arguments": arguments}}


def apply(extras: Extras, sampling: Sampling, load_info: dict[str, Any]) -> Sampling:
    """Check a chat request against the loaded model's template (``load_info``: what the load reported);
    the request's sampling with the grammar it needs (sets ``extras.family`` where calls are to be read).
    ``reasoning_effort`` goes to a template that takes one (GPT-OSS's), ``thinking`` to a template that can turn
    thinking off (Qwen3's ``enable_thinking``); other models reason as they do."""
    reasoning = load_info.get("reasoning") or {}
    efforts = reasoning.get("efforts") or []
    if extras.reasoning_effort is not None and extras.reasoning_effort in efforts:
        extras.template_kwargs = {"reasoning_effort": extras.reasoning_effort, **(extras.template_kwargs or {})}
    toggle = reasoning.get("toggle")
    if extras.thinking is not None and toggle:
        extras.template_kwargs = {str(toggle): extras.thinking, **(extras.template_kwargs or {})}
    if extras.tools:
        template = str(load_info.get("chat_template") or "")
        family = formats.detect(template) if load_info.get("chat_template_source") == "gguf" else None
        if family is None:
            raise ApiError(400, NO_TOOLS, param="tools", code="tools_not_supported")
        if extras.tool_choice == "none":
            if not extras.json_output:
                return sampling
            request = formats.schema_grammar(extras.schema)  # no calls: the answer, read as text
        else:
            extras.family = family
            chosen = [_for_grammar(t) for t in extras.tools if extras.forced in (None, t["function"]["name"])]
            required = extras.tool_choice in ("required", "function")
            if extras.json_output and not required:  # calls, or the final answer in the schema
                request = formats.grammar_with_answer(family, chosen, extras.schema, not extras.single_call,
                                                      think=_thinks(extras, load_info))
            else:
                request = formats.grammar_for(family, chosen, required, not extras.single_call)
    elif extras.json_output:
        request = formats.schema_grammar(extras.schema)
    else:
        return sampling
    return dataclasses.replace(
        sampling, grammar=request.grammar, grammar_schemas=request.schemas, grammar_lazy=request.lazy,
        grammar_triggers=list(request.triggers), grammar_patterns=list(request.patterns))


def _for_grammar(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as its call's grammar sees it: its parameters without what the grammar cannot enforce (the template
    shows the model the whole schema)."""
    function = tool["function"]
    if "parameters" not in function:
        return tool
    return {**tool, "function": {**function, "parameters": schema_rules.loosen(function["parameters"])}}


def _thinks(extras: Extras, load_info: dict[str, Any]) -> bool:
    """Whether the reply may open with a ``<think>`` block: a think-tag reasoning model, thinking not turned off."""
    fmt = load_info.get("reasoning") or {}
    toggle = fmt.get("toggle") or ""
    return bool(fmt.get("kind") == "think" and not (toggle and (extras.template_kwargs or {}).get(toggle) is False))


# The engine's stop reasons of a reply that ended before it was done (its token limit, a full context).
CUT = ("length", "context_full")


def read_calls(extras: Extras, raw: str, stop_reason: str) -> formats.Parsed:
    """A whole reply's content and calls (``extras.family`` set): a call cut by the token limit is dropped, never
    shown as text, and a request for one call gets at most one. Every route reads calls through this (or
    ``call_stream``), whatever protocol it speaks."""
    assert extras.family is not None
    return formats.parse(extras.family, raw, cut=stop_reason in CUT, single=extras.single_call,
                         names=_names(extras))


def _names(extras: Extras) -> frozenset[str]:
    return frozenset(t["function"]["name"] for t in extras.tools or [])


def call_stream(extras: Extras) -> formats.CallStream | None:
    """The streaming reader of a request's calls (None: the reply is plain text); ``finish(cut=stop_reason in
    CUT)`` at the end, as ``read_calls``."""
    if extras.family is None:
        return None
    return formats.CallStream(extras.family, single=extras.single_call, names=_names(extras))


def finish_reason(calls: list[formats.ToolCall], finish: str, stopped: bool) -> str:
    """OpenAI's ``finish_reason`` given the engine's (``finish``, already in OpenAI's words): "length" for a cut
    reply even where it finished calls before the cut, "tool_calls" for calls, "stop" for a stop string."""
    if finish == "length" and not stopped:
        return "length"
    return "tool_calls" if calls else "stop" if stopped else finish


def call_parts(calls: list[formats.ToolCall]) -> list[dict[str, Any]]:
    """``message.tool_calls`` of a response."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls]


def call_deltas(calls: list[formats.ToolCall]) -> list[dict[str, Any]]:
    """``delta.tool_calls`` of a streamed response: each call whole, with its ``index``."""
    return [{"index": n, **part} for n, part in enumerate(call_parts(calls))]
