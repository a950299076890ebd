"""``tools`` with ``response_format`` through ``hisho serve``, for every family (the bundled model's weights with
each family's real template and tokens; replies forced through the engine's test hook ``force_text``): the
request is taken, the grammar of a call or an answer in the schema is built for the family, a forced answer comes
back as content and a forced call as a call; and the OpenAI Agents SDK's ``output_type`` beside a tool works."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.api.conftest import Served, stop_serve
from tests.api.test_schema_output import REPORT_FORMAT
from tests.api.test_tools import ARGS, CALL_TEXT, TOOLS, client, forced, history, serve_with_hooks

pytestmark = pytest.mark.timeout(900)

# "name" in the answer: a Llama 3 reply that is a JSON object must not be taken for a call unless it names a tool.
REPORT = {"city": "Paris", "degrees": 21}
ANSWER = {"harmony": "<|channel|>final<|message|>" + json.dumps(REPORT) + "<|return|>"}


@pytest.fixture(scope="module", params=["hermes", "llama3", "mistral", "harmony"])
def family(request: pytest.FixtureRequest, family_files: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Served]]:
    served = serve_with_hooks(tmp_path_factory.mktemp(f"format_{request.param}"), family_files[request.param])
    yield request.param, served
    stop_serve(served)


def _ask(c: openai.OpenAI, served: Served, text: str, **fields: Any) -> Any:
    return c.chat.completions.create(model=served.model, messages=history(), tools=TOOLS,  # type: ignore[arg-type]
                                     response_format=REPORT_FORMAT, extra_body=forced(text), **fields)  # type: ignore[arg-type]


def test_an_answer_in_the_schema_or_a_call(family: tuple[str, Served]) -> None:
    name, served = family
    c = client(served)
    answer = _ask(c, served, ANSWER.get(name, json.dumps(REPORT)))
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    assert json.loads(answer.choices[0].message.content or "") == REPORT
    call = _ask(c, served, CALL_TEXT[name])
    assert call.choices[0].finish_reason == "tool_calls"
    calls = call.choices[0].message.tool_calls or []
    assert [t.function.name for t in calls] == ["get_weather"] and json.loads(calls[0].function.arguments) == ARGS
    chunks = [ch for ch in _ask(c, served, ANSWER.get(name, json.dumps(REPORT)), stream=True) if ch.choices]
    assert json.loads("".join(ch.choices[0].delta.content or "" for ch in chunks)) == REPORT


def test_agents_sdk_output_type_beside_a_tool(family: tuple[str, Served]) -> None:
    name, served = family
    if name != "hermes":
        pytest.skip("one family is enough for the SDK")
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from pydantic import BaseModel

    class Report(BaseModel):
        city: str
        degrees: int

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return f"21 degrees in {city}"

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model=served.model, openai_client=openai.AsyncOpenAI(
        base_url=served.url, api_key=served.key, max_retries=0))
    agent = Agent(name="weather", instructions="Answer with the weather.", tools=[get_weather], output_type=Report,
                  model=model, model_settings=ModelSettings(extra_body=forced(json.dumps(REPORT))))
    result = Runner.run_sync(agent, "Weather in Paris?")
    assert result.final_output == Report(city="Paris", degrees=21)
