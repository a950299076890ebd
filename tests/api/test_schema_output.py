"""JSON-schema keywords through ``hisho serve`` with the real ``openai`` client, sampled for real on random weights
(a true-shape file with Qwen3's template), so a reply holds a bound only because the grammar allows nothing
else: number bounds are enforced; a keyword no grammar enforces is refused (400) naming where it is."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.api.conftest import Served
from tests.api.test_structured import in_parallel, random_hermes  # noqa: F401  (a fixture)
from tests.api.test_tools import client

pytestmark = pytest.mark.timeout(900)

RATED = {"type": "object", "additionalProperties": False, "required": ["rating", "score", "level"],
         "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5},
                        "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                        "level": {"type": "integer", "minimum": -3, "exclusiveMaximum": 3}}}


def test_number_bounds_hold_every_time(random_hermes: Served) -> None:  # noqa: F811
    c = client(random_hermes)
    fmt = {"type": "json_schema", "json_schema": {"name": "rated", "schema": RATED}}

    def ask(seed: int) -> Any:
        return c.chat.completions.create(model=random_hermes.model, temperature=1.0, seed=seed, max_tokens=120,
                                         messages=[{"role": "user", "content": "Rate it."}],
                                         response_format=fmt)  # type: ignore[arg-type]

    values = [json.loads(r.choices[0].message.content or "") for r in in_parallel(ask)]
    assert all(1 <= v["rating"] <= 5 and isinstance(v["rating"], int) for v in values), values
    assert all(0 < v["score"] <= 1 for v in values), values
    assert all(-3 <= v["level"] < 3 and isinstance(v["level"], int) for v in values), values


def test_a_keyword_no_grammar_enforces_is_refused(random_hermes: Served) -> None:  # noqa: F811
    c = client(random_hermes)
    schema = {"type": "object", "properties": {"rating": {"type": "integer", "multipleOf": 5}}}
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model=random_hermes.model, max_tokens=8, messages=[{"role": "user", "content": "Hi"}],
                                  response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})  # type: ignore[arg-type,typeddict-item]
    body: Any = err.value.body
    assert body["param"] == "response_format.json_schema.schema.properties.rating.multipleOf"
    assert "multiple" in body["message"]


WEATHER_REPORT = {"type": "object", "additionalProperties": False, "required": ["city", "degrees"],
                  "properties": {"city": {"type": "string", "maxLength": 12},
                                 "degrees": {"type": "integer", "minimum": -60, "maximum": 60}}}
REPORT_FORMAT = {"type": "json_schema", "json_schema": {"name": "report", "schema": WEATHER_REPORT}}


def _report(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"city", "degrees"} and isinstance(value["city"], str)
            and len(value["city"]) <= 12 and isinstance(value["degrees"], int) and -60 <= value["degrees"] <= 60)


def test_tools_with_response_format_call_or_answer_in_the_schema(random_hermes: Served) -> None:  # noqa: F811
    """Sampled on random weights: every reply is a well-formed call or an answer in the schema, nothing else."""
    from tests.api.test_tools import TOOLS
    c = client(random_hermes)

    def ask(seed: int) -> Any:
        return c.chat.completions.create(
            model=random_hermes.model, temperature=1.0, seed=seed, max_tokens=150, tools=TOOLS,  # type: ignore[arg-type]
            parallel_tool_calls=False,
            response_format=REPORT_FORMAT, messages=[{"role": "user", "content": "Weather in Paris?"}],  # type: ignore[arg-type]
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})

    calls = answers = 0
    for r in in_parallel(ask):
        choice = r.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
            assert all(t.function.name in ("get_weather", "get_time") for t in choice.message.tool_calls)
            assert all(isinstance(json.loads(t.function.arguments), dict) for t in choice.message.tool_calls)
            calls += 1
        else:
            assert choice.finish_reason == "stop" and _report(json.loads(choice.message.content or "")), choice
            answers += 1
    assert calls + answers == 50


def test_a_schema_the_converter_cannot_take_names_its_field(random_hermes: Served) -> None:  # noqa: F811
    c = client(random_hermes)
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^a(?=b)$"}}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            out = c.chat.completions.create(model=random_hermes.model, max_tokens=8, stream=stream,
                                            messages=[{"role": "user", "content": "Hi"}],
                                            response_format={"type": "json_schema", "json_schema": {  # type: ignore[typeddict-item]
                                                "name": "x", "schema": schema}})
            list(out)  # type: ignore[call-overload]
        body: Any = err.value.body
        assert body["param"] == "response_format.json_schema.schema" and "grammar" in body["message"]
