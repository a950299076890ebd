"""Grammar-constrained replies through ``hisho serve`` with the real ``openai`` client: ``tool_choice`` required and
``response_format`` json_schema on random weights (valid only because the grammar allows nothing else), 50 of
50 each (the schemas bound their strings: random weights never close one by choice); tools on a template without tool support are refused; the disk prompt cache restores a resent system
prompt, tools and history after a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.api.conftest import PARALLEL, Served, start_serve, stop_serve
from tests.api.test_prompt_cache import kv_files
from tests.api.test_tools import ARGS, CALL_TEXT, QUESTION, TOOLS, WEATHER, client, forced, serve_with_hooks
from tests.fixtures.gguf_shapes import true_model
from tests.fixtures.tool_models import rewrite

pytestmark = pytest.mark.timeout(900)

TRIES = 50
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags", "member"],
          "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
                         "member": {"type": "boolean"}}}


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """The JSON-schema keywords these tests use (jsonschema is not a dependency)."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return (isinstance(value, dict) and all(k in value for k in schema.get("required", []))
                and (schema.get("additionalProperties", True) or set(value) <= set(props))
                and all(valid(v, props[k]) for k, v in value.items() if k in props))
    if kind == "array":
        return (isinstance(value, list) and len(value) <= schema.get("maxItems", len(value))
                and all(valid(v, schema.get("items", {})) for v in value))
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return kind is None


@pytest.fixture(scope="module")
def random_hermes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Random weights (a true-shape file) with Qwen3's template."""
    path = rewrite(true_model("llama-tiny", "Q8_0"), tmp_path_factory.mktemp("rnd") / "random-qwen.gguf", "hermes")
    served = start_serve(tmp_path_factory.mktemp("home_rnd"), "--model", str(path))
    yield served
    stop_serve(served)


def in_parallel(job: Any) -> list[Any]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(job, range(TRIES)))


def test_required_tool_call_is_valid_every_time(random_hermes: Served) -> None:
    c = client(random_hermes)

    def ask(seed: int) -> Any:
        return c.chat.completions.create(
            model=random_hermes.model, messages=[{"role": "user", "content": QUESTION}], tools=TOOLS,  # type: ignore[arg-type]
            tool_choice="required", parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=200)

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}  # type: ignore[index]
    good = 0
    for r in in_parallel(ask):
        calls = r.choices[0].message.tool_calls or []
        if r.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name in schemas:
            good += valid(json.loads(calls[0].function.arguments), schemas[calls[0].function.name])
    assert good == TRIES
    # A named function: that one is called.
    r = c.chat.completions.create(model=random_hermes.model, messages=[{"role": "user", "content": QUESTION}],
                                  tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},  # type: ignore[arg-type]
                                  temperature=1.0, seed=1, max_tokens=200)
    assert [call.function.name for call in r.choices[0].message.tool_calls or []][:1] == ["get_time"]


def test_json_schema_output_is_valid_every_time(random_hermes: Served) -> None:
    c = client(random_hermes)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}

    def ask(seed: int) -> Any:
        return c.chat.completions.create(model=random_hermes.model, temperature=1.0, seed=seed, max_tokens=200,
                                         messages=[{"role": "user", "content": "Describe a person."}],
                                         response_format=fmt)  # type: ignore[arg-type]

    replies = in_parallel(ask)
    assert sum(valid(json.loads(r.choices[0].message.content or ""), PERSON) for r in replies) == TRIES
    assert all(r.choices[0].finish_reason == "stop" for r in replies)
    # A schema no grammar can be made of is the client's error.
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=random_hermes.model, max_tokens=8, response_format=bad,  # type: ignore[arg-type]
                                  messages=[{"role": "user", "content": "Hi"}])


def test_tools_without_template_support_are_refused(tmp_path: Path) -> None:
    from hisho.core.models.store import bundled_model_path

    source = bundled_model_path()
    assert source is not None
    served = start_serve(tmp_path / "home", "--model", str(rewrite(source, tmp_path / "gemma-like.gguf", "none")))
    try:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as err:
                out = client(served).chat.completions.create(
                    model=served.model, messages=[{"role": "user", "content": QUESTION}], tools=[WEATHER],  # type: ignore[list-item]
                    stream=stream)
                list(out)  # type: ignore[call-overload]
            assert err.value.code == "tools_not_supported" and "tool-call format" in err.value.message
        # Without tools the same model answers.
        r = client(served).chat.completions.create(model=served.model, max_tokens=4,
                                                   messages=[{"role": "user", "content": QUESTION}])
        assert r.choices[0].finish_reason in ("stop", "length")
        # What the template itself refuses (raise_exception: Gemma 2 takes no system message) is a 400 saying why.
        with pytest.raises(openai.BadRequestError) as refused:
            client(served).chat.completions.create(model=served.model, max_tokens=4, messages=[
                {"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}])
        assert "System role not supported" in refused.value.message
    finally:
        stop_serve(served)


LONG_SYSTEM = "You are the weather desk of a newspaper.\n" + "\n".join(
    f"Rule {i}: give the temperature in the unit the reader asked for, and name the city." for i in range(12))


def test_prompt_cache_restores_system_tools_and_history(tmp_path: Path, family_files: dict[str, Path]) -> None:
    home = tmp_path / "home"
    first_messages: list[dict[str, Any]] = [{"role": "system", "content": LONG_SYSTEM},
                                            {"role": "user", "content": QUESTION}]
    first = serve_with_hooks(home, family_files["hermes"])
    try:
        r1 = client(first).chat.completions.create(model=first.model, messages=first_messages, tools=TOOLS,  # type: ignore[arg-type]
                                                   extra_body=forced(CALL_TEXT["hermes"]))
        assert r1.usage is not None and r1.usage.prompt_tokens > 300
        call = (r1.choices[0].message.tool_calls or [])[0]
    finally:
        stop_serve(first)
    assert kv_files(home), "the prompt's KV was not saved"
    second = serve_with_hooks(home, family_files["hermes"])
    try:
        resent = [*first_messages,
                  {"role": "assistant", "content": "Let me look.", "tool_calls": [call.model_dump()]},
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})}]
        r2 = client(second).chat.completions.create(model=second.model, messages=resent, tools=TOOLS,  # type: ignore[arg-type]
                                                    extra_body=forced("It is 21 degrees."))
        assert r2.choices[0].message.content == "It is 21 degrees."
        assert r2.usage is not None and r2.usage.prompt_tokens_details is not None
        # The system prompt, the tools and the question come from the file (a fresh process holds nothing).
        assert (r2.usage.prompt_tokens_details.cached_tokens or 0) >= r1.usage.prompt_tokens - 64
        assert json.loads(call.function.arguments) == ARGS
    finally:
        stop_serve(second)
