"""Tool calls in a model's own syntax: which family a chat template writes, how to read calls back from a reply's
raw text (all at once, or as it streams), and the grammar that keeps a call well-formed.

Families, recognised from the template text as llama.cpp's ``common/chat.cpp`` does (same markers, same order):

- ``hermes`` (Hermes 2 Pro, Qwen 2.5/3, QwQ): ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, one or more.
- ``harmony`` (GPT-OSS): a message on the commentary channel addressed ``to=functions.NAME``, its body the
  arguments: ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>``; the answer is
  the ``final`` channel, ``analysis`` is reasoning (not content).
- ``llama3`` (Llama 3.1–3.3): the reply is one JSON object ``{"name": …, "parameters": {…}}`` (or follows
  ``<|python_tag|>``).
- ``mistral`` (Mistral Nemo, Small): ``[TOOL_CALLS][{"name": …, "arguments": {…}, "id": …}, …]``.

Grammars are frames in GBNF that name one rule per schema (``GrammarRequest.schemas``); the engine converts
the schemas with llama.cpp's converter. A lazy grammar leaves the reply free until its trigger (the family's call
marker), so a model may answer in words or call; ``tool_choice`` "required" or a named function constrains from
the first token.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("hermes", "harmony", "llama3", "mistral")


def detect(template: str) -> str | None:
    """The tool-call family a chat template writes, or None when it shows no tools (then a request with tools
    cannot be served). Checked in llama.cpp's order: a template may carry more than one marker."""
    if "<tool_call>" in template:
        return "hermes"
    if "<|channel|>" in template:
        return "harmony"
    if "<|start_header_id|>ipython<|end_header_id|>" in template:
        return "llama3"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    return None


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI's ``function.arguments``
    id: str


@dataclass
class Parsed:
    content: str
    calls: list[ToolCall] = field(default_factory=list)


def call_id(family: str) -> str:
    """A new call id. Mistral's templates refuse any id that is not 9 letters or digits."""
    if family == "mistral":
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
    return "call_" + secrets.token_hex(12)


# ----- reading calls ------------------------------------------------------------------------------------------

MARKERS = {"hermes": ("<tool_call>",), "mistral": ("[TOOL_CALLS]",), "llama3": ("<|python_tag|>",)}
_HARMONY_ENDS = ("<|end|>", "<|call|>", "<|return|>")
_DECODER = json.JSONDecoder(strict=False)  # a raw newline inside a string: read it, write it back escaped


def parse(family: str, raw: str, final: bool = True, *, cut: bool = False, single: bool = False,
          names: Collection[str] | None = None) -> Parsed:
    """The content and calls of a reply's raw text. ``final`` False (a reply still streaming): the content is
    only what is surely content (text that may still become a call marker is held back) and no calls. A call
    that does not parse at the end leaves the whole reply as content, as llama.cpp's parsers do, unless the
    reply was ``cut`` (by its token limit or the context): then a call it was writing is never content, the
    content is what came before it and the calls are the ones it finished. ``single``: the request asked for
    one call (a named ``tool_choice``, ``parallel_tool_calls`` false): only the first is read. ``names``: the
    functions offered; a Llama 3 reply that is a bare JSON object is a call only if it names one (else it is an
    answer that happens to have a "name", as a ``response_format`` answer may)."""
    if cut and family == "harmony" and not any(m in raw for m in ("<|message|>", "<|channel|>", "to=")):
        parsed = Parsed(_hold(raw, ("<|channel|>", "<|start|>")))  # no harmony at all: plain text, cut
    elif cut:
        parsed = Parsed(parse(family, raw, final=False).content.rstrip(), _finished_calls(family, raw, names))
    elif family == "harmony":
        parsed = _parse_harmony(raw, final)
    elif family == "llama3":
        parsed = _parse_llama3(raw, final, names)
    else:
        parsed = _parse_marked(family, raw, final)
    if single and len(parsed.calls) > 1:
        parsed.calls = parsed.calls[:1]
    return parsed


def _parse_marked(family: str, raw: str, final: bool) -> Parsed:
    marker = MARKERS[family][0]
    at = raw.find(marker, _after_thinking(raw))
    if at < 0:
        return Parsed(raw if final else _hold(raw, MARKERS[family]))
    if not final:
        return Parsed(raw[:at])
    calls = _hermes_calls(raw, at) if family == "hermes" else _mistral_calls(raw, at + len(marker))
    return Parsed(raw[:at].rstrip(), calls) if calls else Parsed(raw)


def _finished_calls(family: str, raw: str, names: Collection[str] | None) -> list[ToolCall]:
    """The calls a cut reply wrote whole before the one it was cut in."""
    if family == "harmony":
        return [ToolCall(r.group(1), _compact(body), call_id("harmony")) for header, body, ended
                in _harmony_messages(raw) if ended and (r := _RECIPIENT.search(header)) is not None]
    if family == "llama3":
        return _parse_llama3(raw, True, names).calls
    at = raw.find(MARKERS[family][0], _after_thinking(raw))
    if at < 0:
        return []
    if family == "hermes":
        return _hermes_calls(raw, at, partial=True)
    return _mistral_calls(raw, at + len(MARKERS[family][0]))


def _after_thinking(raw: str) -> int:
    """Where calls may start: after a closed ``<think>…</think>`` (Qwen3, QwQ); nowhere while one is open, since
    a model thinking about a call is not making one."""
    if "</think>" in raw:
        return raw.rindex("</think>")
    return len(raw) if "<think>" in raw else 0


def _hold(text: str, markers: tuple[str, ...]) -> str:
    """``text`` without its longest end that could begin a marker."""
    hold = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:n]):
                hold = max(hold, n)
                break
    return text[:len(text) - hold]


def _json_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value starting at ``pos`` (after whitespace) and where it ends; (None, -1) if there is none."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        return None, -1


def _as_call(obj: Any, family: str, args_key: str = "arguments") -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    given = obj.get("id")
    return ToolCall(obj["name"], text, given if isinstance(given, str) and given else call_id(family))


def _hermes_calls(raw: str, at: int, partial: bool = False) -> list[ToolCall]:
    """The calls from ``at`` on; none if one does not parse, or (``partial``) the ones before it."""
    calls: list[ToolCall] = []
    while at >= 0:
        obj, end = _json_at(raw, at + len("<tool_call>"))
        call = _as_call(obj, "hermes")
        if call is None:
            return calls if partial else []
        calls.append(call)
        close = raw.find("</tool_call>", end)
        at = raw.find("<tool_call>", close if close >= 0 else end)
    return calls


def _mistral_calls(raw: str, pos: int) -> list[ToolCall]:
    obj, _end = _json_at(raw, pos)
    items = obj if isinstance(obj, list) else [obj]
    calls = [_as_call(item, "mistral") for item in items]
    return [c for c in calls if c is not None] if all(calls) else []


def _parse_llama3(raw: str, final: bool, names: Collection[str] | None = None) -> Parsed:
    body = raw.lstrip()
    tag = raw.find("<|python_tag|>")
    if tag >= 0:
        head, body = raw[:tag], raw[tag + len("<|python_tag|>"):]
    elif body.startswith("{") or not body:
        head = ""  # a reply that opens with "{" is a call; nothing but blanks so far may still become one
    else:
        return Parsed(raw if final else _hold(raw, MARKERS["llama3"]))
    if not final:
        return Parsed(head)
    obj, _end = _json_at(body, 0)
    call = _as_call(obj, "llama3", "parameters")
    if call is not None and tag < 0 and names is not None and call.name not in names:
        call = None  # a JSON answer, not a call
    return Parsed(head.rstrip(), [call]) if call is not None else Parsed(raw)


def _harmony_messages(raw: str) -> list[tuple[str, str, bool]]:
    """(header, body, ended) of each message of a harmony reply: the reply starts inside the first message's
    header (the prompt ends with ``<|start|>assistant``); ``ended``: its end token is there."""
    out = []
    for segment in raw.split("<|start|>"):
        header, sep, body = segment.partition("<|message|>")
        if not sep:
            continue
        cut = min((i for i in (body.find(e) for e in _HARMONY_ENDS) if i >= 0), default=-1)
        out.append((header, body if cut < 0 else body[:cut], cut >= 0))
    return out


_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


def _compact(body: str) -> str:
    """Arguments as the other families give them (JSON re-serialized), or the text as written if not JSON."""
    obj, end = _json_at(body, 0)
    return json.dumps(obj, ensure_ascii=False) if end >= 0 and not body[end:].strip() else body.strip()


def _parse_harmony(raw: str, final: bool) -> Parsed:
    if "<|message|>" not in raw and "<|channel|>" not in raw:
        return Parsed(raw if final else "")  # no message yet: its header says what it is
    content: list[str] = []
    calls: list[ToolCall] = []
    for header, body, ended in _harmony_messages(raw):
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        if recipient is not None:
            if ended or final:
                calls.append(ToolCall(recipient.group(1), _compact(body), call_id("harmony")))
        elif channel is None or channel.group(1) != "analysis":  # analysis is reasoning, never content
            content.append(body if ended or final else _hold(body, _HARMONY_ENDS + ("<|start|>",)))
    return Parsed("".join(content), calls if final else [])


class CallStream:
    """A streaming reply of a request with tools: ``feed`` each token's raw piece and get the content that can
    be sent now (text surely not part of a call); ``finish`` gives the rest of the content and the calls."""

    def __init__(self, family: str, single: bool = False, names: Collection[str] | None = None) -> None:
        self.family = family
        self.single = single  # one call asked for: only the first is read (``parse``)
        self.names = names
        self.raw = ""
        self.sent = ""

    def feed(self, piece: str) -> str:
        self.raw += piece
        # Blanks wait for what follows: before a call they are dropped (the content ends where the call starts).
        return self._delta(parse(self.family, self.raw, final=False).content.rstrip())

    def finish(self, cut: bool = False) -> tuple[str, list[ToolCall]]:
        """``cut``: the reply ended at its token limit (``parse``): a call it was writing is dropped."""
        done = parse(self.family, self.raw, final=True, cut=cut, single=self.single, names=self.names)
        return self._delta(done.content), done.calls

    def _delta(self, content: str) -> str:
        if not content.startswith(self.sent):  # the end changed its mind (a call that did not parse): the rest
            return ""
        out, self.sent = content[len(self.sent):], content
        return out


# ----- grammars -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GrammarRequest:
    """What a request's sampling gets (``Sampling.grammar``, ``grammar_schemas``, ``grammar_lazy``,
    ``grammar_triggers``, ``grammar_patterns``)."""

    grammar: str
    schemas: dict[str, Any]
    lazy: bool
    triggers: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


def _function(tool: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    function = tool.get("function") or {}
    params = function.get("parameters") or {"type": "object", "properties": {}}
    return str(function.get("name", "")), params


def _call_schema(tool: dict[str, Any], args_key: str, with_id: bool = False) -> dict[str, Any]:
    name, params = _function(tool)
    properties: dict[str, Any] = {"name": {"const": name}, args_key: params}
    if with_id:  # Mistral's templates refuse any other id
        properties["id"] = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
    return {"type": "object", "properties": properties, "required": ["name", args_key]}


def _one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _gbnf_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def grammar_for(family: str, tools: list[dict[str, Any]], required: bool, parallel: bool = True) -> GrammarRequest:
    """The grammar of a call (or calls, ``parallel``) to one of ``tools`` in ``family``'s syntax. ``required``
    (``tool_choice`` "required" or one named function: pass only that tool): constrained from the first token,
    so the reply is a call; else lazy, from the family's call marker on."""
    lazy = not required
    if family == "hermes":
        one = '"<tool_call>" tc-nl tc-call tc-nl "</tool_call>"'
        more = " (tc-nl tc-one)*" if parallel else ""
        frame = f"root ::= tc-one{more}\ntc-one ::= {one}\ntc-nl ::= \"\\n\"?\n"
        schemas = {"tc-call": _one_of([_call_schema(t, "arguments") for t in tools])}
        # The marker, but not inside an open <think> (llama.cpp's trigger skips a thought the same way).
        outside_thought = "^(?:[\\s\\S]*?</think>)?(?:(?!<think>)[\\s\\S])*?(<tool_call>)[\\s\\S]*$"
        return GrammarRequest(frame, schemas, lazy, patterns=(outside_thought,))
    if family == "mistral":
        items = _one_of([_call_schema(t, "arguments", with_id=True) for t in tools])
        array: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
        if not parallel:
            array["maxItems"] = 1
        return GrammarRequest('root ::= "[TOOL_CALLS]" tc-calls\n', {"tc-calls": array}, lazy,
                              triggers=("[TOOL_CALLS]",))
    if family == "llama3":
        schemas = {"tc-call": _one_of([_call_schema(t, "parameters") for t in tools])}
        # A reply that opens with a call object (llama.cpp's own trigger), or <|python_tag|> anywhere.
        opening = '^\\s*(\\{\\s*"name"\\s*:\\s*")[\\s\\S]*$'
        return GrammarRequest('root ::= "<|python_tag|>"? tc-call\n', schemas, lazy,
                              triggers=("<|python_tag|>",), patterns=(opening,))
    if family == "harmony":
        return _harmony_grammar(tools, lazy)
    raise ValueError(f"no tool-call family {family!r}")


def _harmony_grammar(tools: list[dict[str, Any]], lazy: bool) -> GrammarRequest:
    """A call in either place harmony puts its recipient: after the channel (``<|channel|>commentary
    to=functions.NAME <|constrain|>json<|message|>``) or in the role header (``<|start|>assistant
    to=functions.NAME<|channel|>commentary json<|message|>``); constrained from the first token, an analysis
    message may come first."""
    schemas = {f"tc-args-{i}": _function(t)[1] for i, t in enumerate(tools)}
    in_channel = " | ".join(f'{_gbnf_literal(_function(t)[0])} tc-json "<|message|>" tc-args-{i}'
                            for i, t in enumerate(tools))
    in_role = " | ".join(f'{_gbnf_literal(_function(t)[0])} "<|channel|>commentary" tc-json "<|message|>" '
                         f'tc-args-{i}' for i, t in enumerate(tools))
    lines = [
        "root ::= " + ("tc-call" if lazy else "tc-analysis? tc-call"),
        'tc-call ::= "<|channel|>" ( "commentary" | "analysis" ) " to=functions." ( ' + in_channel + " )"
        ' | "<|start|>assistant"? " to=functions." ( ' + in_role + " )",
        'tc-json ::= ( " " "<|constrain|>"? "json" )?',
        'tc-analysis ::= "<|channel|>analysis<|message|>" tc-not-end* "<|end|>" "<|start|>assistant"',
        'tc-not-end ::= [^<] | "<" [^|] | "<|" [^e] | "<|e" [^n] | "<|en" [^d] | "<|end" [^|] | "<|end|" [^>]',
    ]
    patterns = ("^[\\s\\S]*?(<\\|channel\\|>(?:commentary|analysis) to=)[\\s\\S]*$",
                "^(?:[\\s\\S]*?<\\|start\\|>assistant)?( to=)[\\s\\S]*$")
    return GrammarRequest("\n".join(lines) + "\n", schemas, lazy, patterns=patterns)


def _not_before(rule: str, end: str) -> str:
    """A GBNF rule ``rule`` for one step of any text that does not reach ``end`` (repeat it, then ``end``)."""
    steps = [f'{_gbnf_literal(end[:n])} [^{end[n]}]' if n else f"[^{end[0]}]" for n in range(len(end))]
    return f"{rule} ::= " + " | ".join(steps)


def grammar_with_answer(family: str, tools: list[dict[str, Any]], answer: dict[str, Any] | None,
                        parallel: bool = True, think: bool = False) -> GrammarRequest:
    """``tools`` and ``response_format`` together (``tool_choice`` "auto"): the reply is either calls in
    ``family``'s syntax or one JSON value of ``answer`` (None: any object), the final answer, constrained from
    the first token. ``think``: the model may first think in ``<think>…</think>`` (a think-tag reasoning model
    with thinking on). Harmony puts the answer on its final channel, after an analysis message or not."""
    calls = grammar_for(family, tools, required=True, parallel=parallel)
    frame = calls.grammar.replace("root ::=", "tc-reply-calls ::=", 1)
    schemas = {**calls.schemas, "tc-answer": answer if answer is not None else {"type": "object"}}
    if family == "harmony":
        frame = "".join(line + "\n" for line in frame.splitlines() if not line.startswith("tc-reply-calls ::="))
        root = 'root ::= tc-analysis? ( tc-call | "<|channel|>final" tc-json "<|message|>" tc-answer )\n'
        return GrammarRequest(root + frame, schemas, lazy=False)
    if think:
        root = ('root ::= tc-think? ( tc-reply-calls | tc-answer )\n'
                'tc-think ::= "<think>"? tc-thought* "</think>" [ \\t\\n]*\n' + _not_before("tc-thought", "</think>")
                + "\n")
    else:
        root = "root ::= tc-reply-calls | tc-answer\n"
    return GrammarRequest(root + frame, schemas, lazy=False)


def schema_grammar(schema: dict[str, Any] | None) -> GrammarRequest:
    """``response_format``: a reply that is one JSON value of ``schema`` (None: any JSON object)."""
    return GrammarRequest("", {"root": schema if schema is not None else {"type": "object"}}, lazy=False)
