"""Reasoning formats: detection from a chat template, and the streaming splitter that tells reasoning from the
answer whatever way the reply is cut into pieces (a marker split across two tokens, or arriving whole)."""

from __future__ import annotations

import random

import pytest

from hisho.core.formats.reasoning import (
    Channel,
    ReasoningFormat,
    ReasoningKind,
    ReplySplitter,
    detect,
    split_text,
)

R1_TAIL = "{%- if add_generation_prompt and not ns.is_tool -%}{{'<｜Assistant｜><think>\\n'}}{%- endif %}"
QWEN3_TAIL = ("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
              "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
              "{%- endif %}{%- endif %}{# reasoning_content.split('</think>') #}")
HARMONY = ("{{- '<|start|>system<|message|>Reasoning: ' + reasoning_effort + '<|end|>' }}"
           "{{- '<|start|>assistant<|channel|>analysis<|message|>' }}")

THINK = ReasoningFormat(ReasoningKind.THINK)
THINK_INSIDE = ReasoningFormat(ReasoningKind.THINK, starts_inside=True)
HARMONY_FMT = ReasoningFormat(ReasoningKind.HARMONY)


def test_detects_think_tags_opened_by_the_template() -> None:
    fmt = detect(R1_TAIL.replace("{{'<｜Assistant｜><think>\\n'}}", "x") + "</think>",
                 generation_prompt="<｜Assistant｜><think>\n")
    assert fmt.kind is ReasoningKind.THINK and fmt.starts_inside and fmt.toggle == ""


def test_detects_qwen3_toggle_and_harmony_efforts() -> None:
    qwen = detect(QWEN3_TAIL, generation_prompt="<|im_start|>assistant\n")
    assert qwen.kind is ReasoningKind.THINK and not qwen.starts_inside and qwen.toggle == "enable_thinking"
    harmony = detect(HARMONY)
    assert harmony.kind is ReasoningKind.HARMONY and harmony.efforts == ("low", "medium", "high")
    assert detect("{{ messages[0]['content'] }}").kind is ReasoningKind.NONE
    assert detect("plain", tokens=frozenset({"</think>"})).kind is ReasoningKind.THINK


def test_format_round_trips_through_a_dict() -> None:
    fmt = ReasoningFormat(ReasoningKind.HARMONY, efforts=("low", "high"))
    assert ReasoningFormat.from_dict(fmt.to_dict()) == fmt
    assert ReasoningFormat.from_dict({"kind": "martian"}).kind is ReasoningKind.NONE


def _pieces(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 5)
        out.append(text[i:i + n])
        i += n
    return out


def _stream(fmt: ReasoningFormat, text: str, seed: int) -> tuple[str, str]:
    splitter = ReplySplitter(fmt)
    got = {Channel.REASONING: "", Channel.CONTENT: ""}
    for piece in _pieces(text, seed):
        for p in splitter.feed(piece):
            got[p.channel] += p.text
    tail, split = splitter.finish()
    for p in tail:
        got[p.channel] += p.text
    assert got[Channel.REASONING].strip() == split.reasoning
    assert got[Channel.CONTENT].strip() == split.content
    return split.reasoning, split.content


@pytest.mark.parametrize("seed", range(20))
def test_think_tags_split_however_the_reply_is_cut(seed: int) -> None:
    raw = "<think>\nThe user greets me. I should greet back.\n</think>\n\nHello! How can I help?"
    assert _stream(THINK, raw, seed) == ("The user greets me. I should greet back.", "Hello! How can I help?")
    # the template opened the tag: the reply starts inside the reasoning
    inside = raw.removeprefix("<think>\n")
    assert _stream(THINK_INSIDE, inside, seed) == ("The user greets me. I should greet back.",
                                                   "Hello! How can I help?")
    # ... and a model that writes the opening tag again anyway
    assert _stream(THINK_INSIDE, raw, seed)[0] == "The user greets me. I should greet back."


def test_a_think_tag_later_in_an_answer_is_text() -> None:
    split = split_text(THINK, "Use <think> tags like this: <think>x</think>.")
    assert split.reasoning == "" and split.content == "Use <think> tags like this: <think>x</think>."


def test_a_reply_cut_inside_its_reasoning_is_flagged() -> None:
    split = split_text(THINK_INSIDE, "Let me count: 1, 2, 3")
    assert split.unfinished_reasoning and split.reasoning == "Let me count: 1, 2, 3" and split.content == ""
    assert not split_text(THINK, "Just an answer.").unfinished_reasoning


def test_thinking_turned_off_reads_everything_as_the_answer() -> None:
    splitter = ReplySplitter(THINK_INSIDE, thinking=False)
    splitter.feed("Paris.")
    assert splitter.finish()[1].content == "Paris."


@pytest.mark.parametrize("seed", range(20))
def test_harmony_channels(seed: int) -> None:
    raw = ("<|channel|>analysis<|message|>User asks the capital. It is Paris.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>The capital of France is Paris.<|return|>")
    assert _stream(HARMONY_FMT, raw, seed) == ("User asks the capital. It is Paris.",
                                               "The capital of France is Paris.")


def test_harmony_tool_call_goes_to_its_own_channel() -> None:
    raw = ("<|channel|>analysis<|message|>Need weather.<|end|>"
           "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
           "<|message|>{\"city\": \"Paris\"}<|call|>")
    split = split_text(HARMONY_FMT, raw)
    assert split.reasoning == "Need weather." and split.content == ""
    assert [(t.channel, t.recipient, t.text) for t in split.tools] == [
        (Channel.TOOL, "functions.get_weather", '{"city": "Paris"}')]


def test_a_reply_without_format_passes_through() -> None:
    fmt = ReasoningFormat()
    assert split_text(fmt, "  hi <think> there").content == "  hi <think> there"
