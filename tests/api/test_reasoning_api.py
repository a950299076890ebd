"""A reasoning model through ``hisho serve`` with the real ``openai`` client: the answer in ``content``, the thinking
apart in ``message.reasoning_content`` and streamed ``delta.reasoning_content`` (llama-server's and DeepSeek's
fields), for think tags (Qwen3's real template) and GPT-OSS harmony (its real template and control tokens);
``reasoning_effort`` reaches a template that takes one. Replies are forced through the engine (test hook
``force_text``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.api.conftest import Served, stop_serve
from tests.api.test_tools import client, forced, serve_with_hooks

pytestmark = pytest.mark.timeout(900)

THOUGHT = "The user greets me. A short greeting back is right."
ANSWER = "Hello! How can I help?"
REPLY = {
    "hermes": f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}",
    "harmony": f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>final<|message|>"
               f"{ANSWER}<|return|>",
}


@pytest.fixture(scope="module", params=["hermes", "harmony"])
def reasoning_server(request: pytest.FixtureRequest, family_files: dict[str, Path],
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Served]]:
    served = serve_with_hooks(tmp_path_factory.mktemp(f"reasoning_{request.param}"), family_files[request.param])
    yield request.param, served
    stop_serve(served)


def _ask(c: openai.OpenAI, model: str, family: str, **extra: Any) -> Any:
    return c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], temperature=0,
                                     max_tokens=200, extra_body=forced(REPLY[family]), **extra)


def test_reasoning_comes_apart_from_the_answer(reasoning_server: tuple[str, Served]) -> None:
    family, served = reasoning_server
    c = client(served)
    whole = _ask(c, served.model, family)
    message = whole.choices[0].message
    assert message.content == ANSWER
    assert getattr(message, "reasoning_content", None) == THOUGHT
    assert whole.choices[0].finish_reason == "stop"


def test_streamed_reasoning_arrives_as_reasoning_content_deltas(reasoning_server: tuple[str, Served]) -> None:
    family, served = reasoning_server
    c = client(served)
    thought, content = "", ""
    saw_thought_first = None
    for chunk in _ask(c, served.model, family, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = getattr(delta, "reasoning_content", None)
        if piece:
            thought += piece
            saw_thought_first = saw_thought_first if saw_thought_first is not None else not content
        if delta.content:
            content += delta.content
    assert content.strip() == ANSWER and thought.strip() == THOUGHT
    assert saw_thought_first, "the thinking streams before the answer"
    assert "<think>" not in content and "<|channel|>" not in content


def test_reasoning_effort_reaches_a_template_that_takes_one(reasoning_server: tuple[str, Served]) -> None:
    family, served = reasoning_server
    c = client(served)
    got = _ask(c, served.model, family, reasoning_effort="high")
    assert got.choices[0].message.content == ANSWER
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=served.model, messages=[{"role": "user", "content": "Hi"}],
                                  extra_body={"reasoning_effort": 3})
