"""Tool-call formats (hisho.core.formats.tools): the family of real templates, calls read from replies as each
family writes them (whole and while streaming), and the grammar request each family gets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hisho.core.formats import tools as T

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"
ARGS = {"city": "Paris", "unit": "celsius"}
A = json.dumps(ARGS)
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
OTHER = {"type": "function", "function": {"name": "get_time"}}

REPLIES = {  # family -> (raw reply, content, [(name, args)])
    "hermes": (f'Sure.\n<tool_call>\n{{"name": "get_weather", "arguments": {A}}}\n</tool_call>\n'
               f'<tool_call>{{"name": "get_time", "arguments": {{}}}}</tool_call>',
               "Sure.", [("get_weather", ARGS), ("get_time", {})]),
    "llama3": (f' {{"name": "get_weather", "parameters": {A}}}', "", [("get_weather", ARGS)]),
    "mistral": (f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {A}, "id": "abcDEF123"}}]', "",
                [("get_weather", ARGS)]),
    "harmony": ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary "
                f"to=functions.get_weather <|constrain|>json<|message|>{A}<|call|>", "", [("get_weather", ARGS)]),
}


@pytest.mark.parametrize(("name", "family"), [
    ("Qwen-Qwen3-0.6B", "hermes"), ("meta-llama-Llama-3.3-70B-Instruct", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"), ("openai-gpt-oss-120b", "harmony"),
    ("google-gemma-2-2b-it", None)])
def test_family_of_real_templates(name: str, family: str | None) -> None:
    assert T.detect((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")) == family


@pytest.mark.parametrize("family", sorted(REPLIES))
def test_calls_read_whole_and_streamed(family: str) -> None:
    raw, content, calls = REPLIES[family]
    parsed = T.parse(family, raw)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls
    assert all(c.id for c in parsed.calls)
    # Streamed one character at a time: no character of a call ever goes out as content.
    stream = T.CallStream(family)
    sent = "".join(stream.feed(ch) for ch in raw)
    rest, streamed = stream.finish()
    assert sent + rest == content and [(c.name, json.loads(c.arguments)) for c in streamed] == calls


def test_mistral_ids_and_a_text_reply() -> None:
    assert T.parse("mistral", REPLIES["mistral"][0]).calls[0].id == "abcDEF123"
    made = T.call_id("mistral")
    assert len(made) == 9 and made.isalnum()
    for family in REPLIES:  # a plain answer is content, whole or streamed
        text = "It is 21 degrees in Paris." if family != "harmony" else \
            "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 21 degrees."
        want = "It is 21 degrees in Paris." if family != "harmony" else "It is 21 degrees."
        assert T.parse(family, text) == T.Parsed(want, [])
        stream = T.CallStream(family)
        assert "".join(stream.feed(ch) for ch in text) + stream.finish()[0] == want


def test_streamed_content_goes_out_before_the_end() -> None:
    stream = T.CallStream("hermes")
    assert stream.feed("The answer is") == "The answer is"
    assert stream.feed(" <tool_") == ""  # may be a call marker: held back
    assert stream.feed("call>") == ""
    llama = T.CallStream("llama3")
    assert llama.feed("  ") == "" and llama.feed("Hello") == "  Hello"  # blanks wait: a call may follow


def test_a_call_that_does_not_parse_stays_content() -> None:
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {"city": '
    assert T.parse("hermes", raw) == T.Parsed(raw, [])
    # A raw newline inside a string (a grammar of an older converter allows it) is read and written back escaped.
    odd = T.parse("hermes", '<tool_call>{"name": "f", "arguments": {"a": "x\ny"}}</tool_call>')
    assert json.loads(odd.calls[0].arguments) == {"a": "x\ny"}


@pytest.mark.parametrize("family", sorted(REPLIES))
def test_grammar_requests(family: str) -> None:
    lazy = T.grammar_for(family, [TOOL, OTHER], required=False)
    assert lazy.lazy and (lazy.triggers or lazy.patterns) and "root ::=" in lazy.grammar
    assert lazy.schemas and all(isinstance(s, dict) for s in lazy.schemas.values())
    # Every rule the frame names but does not define is a schema's.
    defined = {line.split(" ::=")[0] for line in lazy.grammar.splitlines() if " ::=" in line}
    used = {w.rstrip("*?+") for w in lazy.grammar.replace("(", " ").replace(")", " ").split() if w.startswith("tc-")}
    assert used <= defined | set(lazy.schemas)
    required = T.grammar_for(family, [TOOL], required=True, parallel=False)
    assert not required.lazy
    assert "get_weather" in json.dumps(required.schemas) + required.grammar
    assert "get_time" not in json.dumps(required.schemas) + required.grammar


def test_schema_grammar() -> None:
    assert T.schema_grammar(None).schemas == {"root": {"type": "object"}}
    assert not T.schema_grammar({"type": "array"}).lazy


def test_no_calls_from_a_thought() -> None:
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert T.parse("hermes", "<think>Maybe " + call).calls == []  # still thinking
    assert T.parse("hermes", "<think>Maybe " + call + "</think>No.").calls == []
    assert [c.name for c in T.parse("hermes", "<think>Yes.</think>" + call).calls] == ["f"]
    pattern = re.compile(T.grammar_for("hermes", [TOOL], required=False).patterns[0])
    assert pattern.fullmatch("<think>I could use <tool_call>") is None
    assert pattern.fullmatch("<think>ok</think>\n<tool_call>") is not None
    assert pattern.fullmatch("Sure. <tool_call>") is not None



@pytest.mark.parametrize("family", sorted(REPLIES))
def test_a_cut_call_is_never_content(family: str) -> None:
    """A reply cut anywhere inside its first call (its token limit): the content is what came before the call,
    whole or streamed, and no call is made of the part."""
    raw, content, _calls = REPLIES[family]
    start = raw.index({"hermes": "<tool_call>", "harmony": "<|start|>"}.get(family, raw[0]))
    end = raw.index("}", raw.index(A)) if family != "hermes" else raw.index("</tool_call>") - 2
    for at in range(start + 1, end):
        part = raw[:at]
        parsed = T.parse(family, part, cut=True)
        assert parsed == T.Parsed(content, []), (at, part, parsed)
        stream = T.CallStream(family)
        sent = "".join(stream.feed(ch) for ch in part)
        rest, calls = stream.finish(cut=True)
        assert sent + rest == content and not calls, (at, part)


def test_a_cut_reply_keeps_the_calls_it_finished_and_plain_text() -> None:
    raw = REPLIES["hermes"][0]
    second = raw.rindex("<tool_call>")
    parsed = T.parse("hermes", raw[:second + 20], cut=True)
    assert parsed.content == "Sure." and [c.name for c in parsed.calls] == ["get_weather"]
    assert T.parse("hermes", "It is 21 degr", cut=True) == T.Parsed("It is 21 degr", [])
    assert T.parse("hermes", "It is 21 <tool_ca", cut=True) == T.Parsed("It is 21", [])
    assert T.parse("harmony", "It is 21 degr", cut=True) == T.Parsed("It is 21 degr", [])


def test_one_call_when_one_is_asked_for() -> None:
    raw = REPLIES["hermes"][0]
    assert [c.name for c in T.parse("hermes", raw, single=True).calls] == ["get_weather"]
    stream = T.CallStream("hermes", single=True)
    stream.feed(raw)
    assert [c.name for c in stream.finish()[1]] == ["get_weather"]
    one = T.grammar_for("hermes", [TOOL], required=True, parallel=False)
    assert "tc-one)*" not in one.grammar and "tc-one)*" in T.grammar_for("hermes", [TOOL], required=True).grammar
