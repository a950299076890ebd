"""OpenAI's Responses API through ``hisho serve`` with the real ``openai`` client and the OpenAI Agents SDK.

The servers run the bundled model's weights with a real tool-calling template (Qwen3's ``<tool_call>``, and GPT-OSS
harmony, whose replies carry reasoning; tests/fixtures/tool_models.py); replies are forced through the engine
(test hook ``force_text``), except where the grammar is what is tested (``text.format`` json_schema), which
samples for real.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.api.conftest import Served, stop_serve
from tests.api.test_prompt_cache import kv_files
from tests.api.test_structured import LONG_SYSTEM, PERSON, valid
from tests.api.test_tools import (
    ANSWER,
    ANSWER_TEXT,
    ARGS,
    CALL_CONTENT,
    CALL_TEXT,
    QUESTION,
    SYSTEM,
    forced,
    serve_with_hooks,
)

pytestmark = pytest.mark.timeout(900)

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city now.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"]}}
LONG = "You are the weather desk of a newspaper. " + " ".join(
    f"Rule {i}: give the temperature in the unit the reader asked for." for i in range(10))


@pytest.fixture(scope="module")
def servers(family_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """One server per family, started when a test first asks for it."""
    started: dict[str, Served] = {}

    class Lazy(dict[str, Served]):
        def __missing__(self, name: str) -> Served:
            started[name] = serve_with_hooks(tmp_path_factory.mktemp(f"home_{name}"), family_files[name])
            return started[name]

    yield Lazy()
    for served in started.values():
        stop_serve(served)


@pytest.fixture()
def hermes(servers: dict[str, Served]) -> Served:
    return servers["hermes"]


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)


def raw(served: Served, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, served.url + path, json=body, timeout=120,
                         headers={"Authorization": f"Bearer {served.key}"})


def test_create_text_usage_and_cached_prefix(hermes: Served) -> None:
    c = client(hermes)
    r = c.responses.create(model=hermes.model, instructions=LONG, input="Hello!", extra_body=forced("Hello there."))
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.output_text == "Hello there." and r.instructions == LONG and r.incomplete_details is None
    assert [o.type for o in r.output] == ["message"]
    assert r.usage is not None and r.usage.input_tokens > 100 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    again = c.responses.create(model=hermes.model, instructions=LONG, input="Hello again!",
                               extra_body=forced("Hi."))
    # The instructions are the same prefix: their cells are reused, not read again.
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > r.usage.input_tokens // 2
    # Cut at max_output_tokens: incomplete, and says why.
    cut = c.responses.create(model=hermes.model, input="Hello!", max_output_tokens=3,
                             extra_body=forced("One two three four five six."))
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens" and cut.usage is not None
    assert cut.usage.output_tokens == 3


def test_stream(hermes: Served) -> None:
    c = client(hermes)
    with c.responses.stream(model=hermes.model, input="Hello!", extra_body=forced("Hello there, friend.")) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "Hello there, friend." == final.output_text
    assert final.usage is not None and final.usage.output_tokens > 0
    assert c.responses.retrieve(final.id).output_text == final.output_text


def test_stream_function_call(hermes: Served) -> None:
    c = client(hermes)
    with c.responses.stream(model=hermes.model, instructions=SYSTEM, input=QUESTION, tools=[WEATHER],  # type: ignore[list-item]
                            extra_body=forced(CALL_TEXT["hermes"])) as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == ARGS
    assert [o.type for o in final.output] == ["message", "function_call"]
    call = final.output[1]
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    assert final.output_text == CALL_CONTENT["hermes"]


def test_stream_reasoning(servers: dict[str, Served]) -> None:
    harmony = servers["harmony"]
    with client(harmony).responses.stream(model=harmony.model, input=QUESTION, include=["reasoning.encrypted_content"],
                                          extra_body=forced(ANSWER_TEXT["harmony"])) as stream:
        events = list(stream)
        final = stream.get_final_response()
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thought == "The tool said 21."
    said = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert said == ANSWER == final.output_text
    assert [o.type for o in final.output] == ["reasoning", "message"]
    reasoning = final.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content == thought


@pytest.mark.parametrize("name", ["hermes", "harmony"])
def test_function_call_round_trip(servers: dict[str, Served], name: str) -> None:
    served = servers[name]
    c = client(served)
    first = c.responses.create(model=served.model, instructions=SYSTEM, input=QUESTION, tools=[WEATHER],  # type: ignore[list-item]
                               extra_body=forced(CALL_TEXT[name]))
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == ARGS
    if name == "harmony":  # its analysis channel is the reasoning
        assert first.output[0].type == "reasoning" and first.output[0].content is not None
        assert first.output[0].content[0].text == "The user wants the weather."
        assert first.usage is not None and first.usage.output_tokens_details.reasoning_tokens > 0
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": json.dumps({"temperature": 21})}
    # The client resends the conversation, the model's own output items as they came...
    resent = c.responses.create(model=served.model, instructions=SYSTEM, tools=[WEATHER],  # type: ignore[list-item]
                                input=[{"role": "user", "content": QUESTION},
                                       *[o.model_dump(exclude_none=True) for o in first.output], result],  # type: ignore[list-item]
                                extra_body=forced(ANSWER_TEXT.get(name, ANSWER)))
    assert resent.output_text == ANSWER and not [o for o in resent.output if o.type == "function_call"]
    # ... or names the response it continues.
    continued = c.responses.create(model=served.model, instructions=SYSTEM, tools=[WEATHER], input=[result],  # type: ignore[list-item]
                                   previous_response_id=first.id, extra_body=forced(ANSWER_TEXT.get(name, ANSWER)))
    assert continued.output_text == ANSWER and continued.previous_response_id == first.id
    # Both prompts are the same conversation, rendered the same: the second reads only what is new.
    assert resent.usage is not None and continued.usage is not None and first.usage is not None
    assert continued.usage.input_tokens == resent.usage.input_tokens
    # The first prompt is never read again, and the continuation is the resent prompt, read from its cells.
    assert resent.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert continued.usage.input_tokens_details.cached_tokens >= continued.usage.input_tokens - 1


def test_previous_response_id_get_and_delete(hermes: Served) -> None:
    c = client(hermes)
    first = c.responses.create(model=hermes.model, input="My name is Ada.", extra_body=forced("Nice to meet you."))
    second = c.responses.create(model=hermes.model, input="What is my name?", previous_response_id=first.id,
                                extra_body=forced("Ada."))
    alone = c.responses.create(model=hermes.model, input="What is my name?", store=False, extra_body=forced("Ada."))
    # The continuation's prompt holds the first exchange.
    assert second.usage is not None and alone.usage is not None and first.usage is not None
    assert second.usage.input_tokens > alone.usage.input_tokens + 5
    got = c.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == "Ada." and got.previous_response_id == first.id
    with pytest.raises(openai.NotFoundError):  # store: false keeps nothing
        c.responses.retrieve(alone.id)
    c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as err:
        c.responses.create(model=hermes.model, input="Again?", previous_response_id=first.id)
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert raw(hermes, "DELETE", f"/responses/{first.id}").status_code == 404


def test_json_schema_output(hermes: Served) -> None:
    c = client(hermes)
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
    r = c.responses.create(model=hermes.model, input="Describe a person.", text=fmt, temperature=1.0,  # type: ignore[arg-type]
                           max_output_tokens=200)
    assert valid(json.loads(r.output_text), PERSON)
    assert r.text is not None and r.text.format is not None and r.text.format.type == "json_schema"
    bad = {"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "#/nowhere"}}}
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model=hermes.model, input="Hi", text=bad, max_output_tokens=8)  # type: ignore[arg-type]
    assert err.value.body["param"] == "text.format.schema.$ref"  # type: ignore[index]


def test_agents_sdk_runs_a_tool_to_its_final_output(hermes: Served) -> None:
    import asyncio

    from agents import Agent, ModelSettings, RunHooks, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)
    seen: list[tuple[str, str]] = []

    @function_tool
    def get_weather(city: str, unit: str) -> str:
        """The weather in a city now."""
        seen.append((city, unit))
        return json.dumps({"temperature": 21})

    hook: dict[str, Any] = {"force_text": ""}

    class Forced(RunHooks[Any]):
        """The reply the model is made to write: the call first, the answer once the tool result is in."""

        async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
            answered = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input_items)
            hook["force_text"] = ANSWER if answered else CALL_TEXT["hermes"]

    def agent() -> Any:
        model = OpenAIResponsesModel(hermes.model, openai.AsyncOpenAI(base_url=hermes.url, api_key=hermes.key,
                                                                      max_retries=0, timeout=300))
        return Agent(name="weather", instructions=SYSTEM, tools=[get_weather], model=model,
                     model_settings=ModelSettings(extra_body={"hisho_test_hooks": hook}))

    result = asyncio.run(Runner.run(agent(), QUESTION, hooks=Forced()))
    assert seen == [("Paris", "celsius")]
    assert result.final_output == ANSWER

    async def run_streamed() -> Any:   # the SDK's streamed path: responses.create(stream=True)
        streamed = Runner.run_streamed(agent(), QUESTION, hooks=Forced())
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    assert asyncio.run(run_streamed()) == ANSWER and len(seen) == 2


def test_a_client_that_leaves_mid_stream_is_cancelled(hermes: Served) -> None:
    health = hermes.url.removesuffix("/v1") + "/health"
    before = httpx.get(health).json()["cancelled"]
    stream = client(hermes).responses.create(model=hermes.model, input="Count.", stream=True,
                                             extra_body=forced(" ".join(str(i) for i in range(400))))
    for event in stream:
        if event.type == "response.output_text.delta":
            break
    stream.close()
    deadline = time.monotonic() + 30
    while httpx.get(health).json()["busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    h = httpx.get(health).json()
    assert h["busy"] == 0 and h["cancelled"] == before + 1


BAD = [
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_video", "text": "x"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"role": "user", "content": "Hi"},
                {"type": "function_call_output", "call_id": "call_nowhere", "output": "21"}]}, "input[1].call_id"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "tool", "content": "Hi"}]}, "input[0].role"),
    ({"input": "Hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "Hi", "max_output_tokens": 100000}, "max_output_tokens"),
    ({"input": "Hi", "background": True}, "background"),
    ({"input": "word " * 3000}, "input"),   # more characters than a sequence's context can hold
    ({"input": []}, "input"),
]


def test_bad_input_is_a_400_naming_the_field(hermes: Served) -> None:
    for body, param in BAD:
        r = raw(hermes, "POST", "/responses", {"model": hermes.model, **body})
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.json())
    missing = raw(hermes, "POST", "/responses", {"model": hermes.model, "input": "Hi",
                                                 "previous_response_id": "resp_nowhere"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "previous_response_id"
    assert raw(hermes, "GET", "/responses/resp_nowhere").status_code == 404


def test_disk_prompt_cache_and_kept_responses_outlive_a_restart(tmp_path: Path, family_files: dict[str, Path]) -> None:
    """An agent's resent instructions, tools and history come from the disk prompt cache after a restart, as a chat
    request's do; a kept response is still there to continue from."""
    home = tmp_path / "home"
    first = serve_with_hooks(home, family_files["hermes"])
    try:
        r1 = client(first).responses.create(model=first.model, instructions=LONG_SYSTEM, input=QUESTION,
                                            tools=[WEATHER], extra_body=forced(CALL_TEXT["hermes"]))  # type: ignore[list-item]
        assert r1.usage is not None and r1.usage.input_tokens > 300
    finally:
        stop_serve(first)
    assert kv_files(home), "the prompt's KV was not saved"
    second = serve_with_hooks(home, family_files["hermes"])
    try:
        call = next(o for o in r1.output if o.type == "function_call")
        r2 = client(second).responses.create(
            model=second.model, instructions=LONG_SYSTEM, tools=[WEATHER], previous_response_id=r1.id,  # type: ignore[list-item]
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21"}],
            extra_body=forced("It is 21 degrees."))
        assert r2.output_text == "It is 21 degrees." and r2.usage is not None
        # The instructions, the tools and the question come from the file (a fresh process holds nothing).
        assert r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens - 64
    finally:
        stop_serve(second)


def test_an_engine_that_fails_mid_stream_ends_it_with_response_failed(default_model_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from hisho.api.backend import Backend
    from hisho.api.server import ApiServer
    from hisho.core.engine.client import EngineClient
    from hisho.core.engine.protocol import LoadParams
    from hisho.core.errors import EngineCrashed
    from hisho.core.models.names import ModelName

    monkeypatch.setenv("HISHO_ENGINE_TEST_HOOKS", "1")   # force_text, read in this process's API
    engine = EngineClient(test_hooks=True)
    engine.load(dataclasses.replace(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=1),
                                    kv_unified=False))
    server = ApiServer(Backend(lambda: engine, lambda: ModelName("m", "m"), {}, 256), "k", port=0)
    server.start()
    try:
        c = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0, timeout=120)
        events = iter(c.responses.create(model="m", input="Count.", stream=True,
                                         extra_body=forced(" ".join(str(i) for i in range(300)))))
        while next(events).type != "response.output_text.delta":
            pass
        with pytest.raises(EngineCrashed):
            engine.call("abort")  # the engine's test hook: ggml_abort() between two steps of the serving batch
        rest = list(events)
        assert rest[-1].type == "response.failed"
        failed = rest[-1].response
        assert failed.status == "failed" and failed.error is not None and failed.error.code == "engine_crashed"
        assert [e.type for e in rest[-4:-1]] == ["response.output_text.done", "response.content_part.done",
                                                 "response.output_item.done"]
    finally:
        server.stop()
        engine.close()
