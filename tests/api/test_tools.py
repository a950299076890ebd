"""Tool calls and structured output through ``hisho serve`` with the real ``openai`` client.

Each family's round trip (call, tool result, final answer; streamed and not) runs on the bundled model's weights
with a real chat template and the family's special tokens (tests/fixtures/tool_models.py); the replies are forced
through the engine (test hook ``force_text``: the tokens go into the KV as sampled ones would), since a 135M
model does not call tools on its own. The grammar tests sample for real, on random weights: what they produce is
a valid call or valid JSON only because the grammar allows nothing else.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.api.conftest import Served, start_serve, stop_serve

pytestmark = pytest.mark.timeout(900)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time in a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                                                        "required": ["city"]}}}
TOOLS = [WEATHER, TIME]
ARGS = {"city": "Paris", "unit": "celsius"}
SYSTEM = "You are a weather assistant. Call a tool when the user asks about the weather."
QUESTION = "What is the weather in Paris?"
ANSWER = "It is 21 degrees in Paris."

# What each family's model writes for the call, and for the answer after the tool result.
CALL_TEXT = {
    "hermes": 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(ARGS) + "}\n</tool_call>",
    "llama3": '{"name": "get_weather", "parameters": ' + json.dumps(ARGS) + "}<|eom_id|>",
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": ' + json.dumps(ARGS) + ', "id": "abcDEF123"}]',
    "harmony": "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant<|channel|>"
               "commentary to=functions.get_weather <|constrain|>json<|message|>" + json.dumps(ARGS) + "<|call|>",
}
CALL_CONTENT = {"hermes": "Let me look."}
ANSWER_TEXT = {"harmony": "<|channel|>analysis<|message|>The tool said 21.<|end|><|start|>assistant<|channel|>final"
                          "<|message|>" + ANSWER + "<|return|>"}


def serve_with_hooks(home: Path, model: Path) -> Served:
    """``hisho serve`` on ``model`` with the engine's test hooks on (force_text)."""
    before = os.environ.get("HISHO_ENGINE_TEST_HOOKS")
    os.environ["HISHO_ENGINE_TEST_HOOKS"] = "1"
    try:
        return start_serve(home, "--model", str(model))
    finally:
        if before is None:
            del os.environ["HISHO_ENGINE_TEST_HOOKS"]
        else:
            os.environ["HISHO_ENGINE_TEST_HOOKS"] = before


@pytest.fixture(scope="module", params=["hermes", "llama3", "mistral", "harmony"])
def family(request: pytest.FixtureRequest, family_files: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Served]]:
    served = serve_with_hooks(tmp_path_factory.mktemp(f"home_{request.param}"), family_files[request.param])
    yield request.param, served
    stop_serve(served)


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)


def forced(text: str) -> dict[str, Any]:
    return {"hisho_test_hooks": {"force_text": text}}


def history() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


def with_result(call_id: str, arguments: str) -> list[dict[str, Any]]:
    return [*history(),
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"temperature": 21})}]


def test_round_trip(family: tuple[str, Served]) -> None:
    name, served = family
    c = client(served)
    r = c.chat.completions.create(model=served.model, messages=history(), tools=TOOLS,  # type: ignore[arg-type]
                                  extra_body=forced(CALL_TEXT[name]))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == CALL_CONTENT.get(name)
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1 and calls[0].type == "function"
    assert calls[0].function.name == "get_weather" and json.loads(calls[0].function.arguments) == ARGS
    assert calls[0].id and (name != "mistral" or calls[0].id == "abcDEF123")
    final = c.chat.completions.create(model=served.model, messages=with_result(calls[0].id, calls[0].function.arguments),  # type: ignore[arg-type]
                                      tools=TOOLS, extra_body=forced(ANSWER_TEXT.get(name, ANSWER)))  # type: ignore[arg-type]
    assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls
    assert final.choices[0].message.content == ANSWER
    # The second request's prompt starts with the first's: its cells are reused up to the assistant's turn.
    assert final.usage is not None and final.usage.prompt_tokens_details is not None and r.usage is not None
    assert (final.usage.prompt_tokens_details.cached_tokens or 0) > r.usage.prompt_tokens // 2


def test_round_trip_streamed(family: tuple[str, Served]) -> None:
    name, served = family
    c = client(served)
    chunks = list(c.chat.completions.create(model=served.model, messages=history(), tools=TOOLS,  # type: ignore[arg-type]
                                            stream=True, extra_body=forced(CALL_TEXT[name])))
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert content == CALL_CONTENT.get(name, "")
    deltas = [d for ch in chunks if ch.choices for d in ch.choices[0].delta.tool_calls or []]
    assert len(deltas) == 1 and deltas[0].index == 0 and deltas[0].id and deltas[0].type == "function"
    assert deltas[0].function is not None and deltas[0].function.name == "get_weather"
    assert json.loads(deltas[0].function.arguments or "") == ARGS
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    call_id = str(deltas[0].id)
    stream = c.chat.completions.create(model=served.model, messages=with_result(call_id, json.dumps(ARGS)),  # type: ignore[arg-type]
                                       tools=TOOLS, stream=True, extra_body=forced(ANSWER_TEXT.get(name, ANSWER)))  # type: ignore[arg-type]
    chunks = list(stream)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == ANSWER
    assert not any(ch.choices[0].delta.tool_calls for ch in chunks if ch.choices)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["stop"]
