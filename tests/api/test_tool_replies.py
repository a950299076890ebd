"""How a reply with tools reads back through ``hisho serve`` with the real ``openai`` client, for every family
(the bundled model's weights with each family's real template and tokens, replies forced through the engine's
test hook ``force_text``): a call cut by ``max_tokens`` is never shown as text, whole or streamed; a request
for one call gets one; control tokens other than a format's markers never reach ``content`` or
``reasoning_content``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.api.conftest import Served, stop_serve
from tests.api.test_structured import random_hermes  # noqa: F401  (a fixture)
from tests.api.test_tools import (
    ARGS,
    CALL_CONTENT,
    CALL_TEXT,
    QUESTION,
    TOOLS,
    client,
    forced,
    history,
    serve_with_hooks,
)

pytestmark = pytest.mark.timeout(900)

MARKUP = ("<tool_call>", "<tool", "[TOOL_CALLS]", "<|", "{\"name", "to=functions")


@pytest.fixture(scope="module", params=["hermes", "llama3", "mistral", "harmony"])
def family(request: pytest.FixtureRequest, family_files: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Served]]:
    served = serve_with_hooks(tmp_path_factory.mktemp(f"replies_{request.param}"), family_files[request.param])
    yield request.param, served
    stop_serve(served)


def _ask(c: openai.OpenAI, served: Served, text: str, **fields: Any) -> Any:
    return c.chat.completions.create(model=served.model, messages=history(), tools=TOOLS,  # type: ignore[arg-type]
                                     extra_body=forced(text), **fields)


def _streamed(c: openai.OpenAI, served: Served, text: str, **fields: Any) -> tuple[str, list[Any], list[str]]:
    chunks = [ch for ch in _ask(c, served, text, stream=True, **fields) if ch.choices]
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    calls = [d for ch in chunks for d in ch.choices[0].delta.tool_calls or []]
    return content, calls, [ch.choices[0].finish_reason for ch in chunks if ch.choices[0].finish_reason]


def test_a_call_cut_by_max_tokens_is_never_text(family: tuple[str, Served]) -> None:
    name, served = family
    c = client(served)
    whole = _ask(c, served, CALL_TEXT[name])
    assert whole.usage is not None and whole.choices[0].finish_reason == "tool_calls"
    n = whole.usage.completion_tokens
    # In the call's header (harmony), in its arguments; in its marker where the reply opens with it.
    for cut in (n // 2, 3 * n // 4, *((3,) if name != "hermes" else ())):
        r = _ask(c, served, CALL_TEXT[name], max_tokens=cut)
        message = r.choices[0].message
        assert r.choices[0].finish_reason == "length", (cut, message)
        assert not message.tool_calls, (cut, message)
        assert message.content == CALL_CONTENT.get(name), (cut, message.content)
        content, calls, finishes = _streamed(c, served, CALL_TEXT[name], max_tokens=cut)
        assert content == CALL_CONTENT.get(name, ""), (cut, content)
        assert not calls and finishes == ["length"], (cut, calls, finishes)
        assert not any(m in (message.content or "") + content for m in MARKUP)


def test_one_call_when_parallel_calls_are_off(family: tuple[str, Served]) -> None:
    name, served = family
    if name not in ("hermes", "mistral"):
        pytest.skip("the family writes one call per reply")
    two = {"hermes": CALL_TEXT["hermes"] + '\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n'
                                           "</tool_call>",
           "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": ' + json.dumps(ARGS) + ', "id": '
                      '"abcDEF123"}, {"name": "get_time", "arguments": {"city": "Oslo"}, "id": "xyzXYZ789"}]'}[name]
    c = client(served)
    assert len(_ask(c, served, two).choices[0].message.tool_calls or []) == 2
    r = _ask(c, served, two, parallel_tool_calls=False)
    assert [t.function.name for t in r.choices[0].message.tool_calls or []] == ["get_weather"]
    _content, calls, finishes = _streamed(c, served, two, parallel_tool_calls=False)
    assert [d.function.name for d in calls] == ["get_weather"] and finishes == ["tool_calls"]
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = _ask(c, served, two, tool_choice=named)
    assert [t.function.name for t in r.choices[0].message.tool_calls or []] == ["get_weather"]


def test_a_named_tool_choice_calls_it_once(random_hermes: Served) -> None:  # noqa: F811
    """Sampled for real on random weights: the grammar ends after the one call, so the reply ends there."""
    c = client(random_hermes)
    for seed in range(4):
        r = c.chat.completions.create(
            model=random_hermes.model, messages=[{"role": "user", "content": QUESTION}], tools=TOOLS,  # type: ignore[arg-type]
            tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=1.0, seed=seed,
            max_tokens=400)
        calls = r.choices[0].message.tool_calls or []
        assert [t.function.name for t in calls] == ["get_time"], (seed, r.choices[0])
        assert r.choices[0].finish_reason == "tool_calls"


def test_control_tokens_never_reach_the_text(family: tuple[str, Served]) -> None:
    """A control token that is no marker of the model's formats (ChatML's ``<|im_start|>`` in SmolLM2's
    vocabulary, Llama 3's header tokens) is dropped from content and reasoning, with tools or without."""
    name, served = family
    stray = {"hermes": "<|im_start|>", "llama3": "<|start_header_id|>", "mistral": "[INST]",
             "harmony": "<|im_start|>"}[name]
    answer = f"Hello{stray} there."
    text = {"hermes": f"<think>\nA plan.{stray}\n</think>\n\n{answer}",
            "harmony": f"<|channel|>analysis<|message|>A plan.{stray}<|end|><|start|>assistant<|channel|>final"
                       f"<|message|>{answer}<|return|>"}.get(name, answer)
    c = client(served)
    for tools in (TOOLS, None):
        fields: dict[str, Any] = {"tools": tools} if tools else {}
        r = c.chat.completions.create(model=served.model, messages=history(), extra_body=forced(text), **fields)
        message = r.choices[0].message
        assert message.content == "Hello there.", (tools is not None, message)
        assert getattr(message, "reasoning_content", None) in (None, "A plan."), message
        chunks = [ch for ch in c.chat.completions.create(model=served.model, messages=history(), stream=True,
                                                         extra_body=forced(text), **fields) if ch.choices]
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Hello there."
        thought = "".join(getattr(ch.choices[0].delta, "reasoning_content", None) or "" for ch in chunks)
        assert thought.strip() in ("", "A plan.")


def test_control_tokens_never_reach_a_deepseek_r1_reply(tmp_path: Path) -> None:
    """DeepSeek-R1's template opens the thought in the prompt; a stray ``<|im_start|>`` (a control token of the
    vocabulary) in the thought or the answer is dropped from both, whole and streamed."""
    from hisho.core.models.store import bundled_model_path
    from tests.fixtures.tool_models import rewrite

    source = bundled_model_path()
    assert source is not None
    served = serve_with_hooks(tmp_path / "home", rewrite(source, tmp_path / "r1-test.gguf", "deepseek-r1"))
    try:
        c = client(served)
        text = "A plan.<|im_start|>\n</think>\n\nHello<|im_start|> there."
        r = c.chat.completions.create(model=served.model, messages=history(), extra_body=forced(text))
        message = r.choices[0].message
        assert message.content == "Hello there." and getattr(message, "reasoning_content", None) == "A plan."
        chunks = [ch for ch in c.chat.completions.create(model=served.model, messages=history(), stream=True,
                                                         extra_body=forced(text)) if ch.choices]
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Hello there."
        thought = "".join(getattr(ch.choices[0].delta, "reasoning_content", None) or "" for ch in chunks)
        assert thought.strip() == "A plan."
    finally:
        stop_serve(served)
