"""The chat API's tool and structured-output fields as requests (hisho.api.shapes, hisho.api.tooling): what is
taken, what each bad request is refused with, which grammar a request gets for the loaded model's template. No
server, no engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hisho.api import tooling
from hisho.api.shapes import ApiError, parse_chat

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "Weather?"}]


def chat(**fields: Any) -> Any:
    return parse_chat({"model": "m", "messages": ASK, **fields}, {}, 64)


def load_info(template: str) -> dict[str, Any]:
    return {"chat_template": (TEMPLATES / template).read_text(encoding="utf-8"), "chat_template_source": "gguf"}


def test_history_with_calls_and_results() -> None:
    job = parse_chat({"model": "m", "tools": [TOOL], "messages": [
        *ASK, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"}]}, {}, 64)
    assert job.messages is not None
    assert job.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
    assert job.messages[2] == {"role": "tool", "content": "cold", "tool_call_id": "c1", "name": "get_weather"}
    assert job.extras.tools == [TOOL] and job.extras.tool_choice == "auto"


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": {"name": "x"}}, "tools"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0]"),
    ({"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"rating": {"type": "integer", "multipleOf": 2}}}}}},
     "response_format.json_schema.schema.properties.rating.multipleOf"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}},
     "response_format.json_schema.schema.$ref"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"tags": {"type": "strings"}}}}}]},
     "tools[0].function.parameters.properties.tags.type"),
    ({"messages": [*ASK, {"role": "tool", "tool_call_id": "c1", "content": "cold"}]}, "messages[1].tool_call_id"),
    ({"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "cold"}]}, "messages[2].tool_call_id"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"messages": [*ASK, {"role": "tool", "content": "cold"}]}, "messages[1].tool_call_id"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_requests(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        chat(**fields)
    assert err.value.status == 400 and err.value.param == param
    assert "Error" not in err.value.message and "assert" not in err.value.message  # plain words, no Python


@pytest.mark.parametrize(("template", "family", "lazy"), [
    ("Qwen-Qwen3-0.6B.jinja", "hermes", True), ("openai-gpt-oss-120b.jinja", "harmony", True),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3", True),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", True)])
def test_grammar_follows_the_template(template: str, family: str, lazy: bool) -> None:
    job = chat(tools=[TOOL])
    sampling = tooling.apply(job.extras, job.sampling, load_info(template))
    assert job.extras.family == family and sampling.grammar_lazy is lazy and sampling.grammar_schemas
    forced = chat(tools=[TOOL], tool_choice="required")
    assert not tooling.apply(forced.extras, forced.sampling, load_info(template)).grammar_lazy
    off = chat(tools=[TOOL], tool_choice="none")
    assert not tooling.apply(off.extras, off.sampling, load_info(template)).grammar_schemas
    assert off.extras.family is None  # the reply is read as text


def test_tools_on_a_template_without_them_are_refused() -> None:
    job = chat(tools=[TOOL])
    with pytest.raises(ApiError) as err:
        tooling.apply(job.extras, job.sampling, load_info("google-gemma-2-2b-it.jinja"))
    assert err.value.status == 400 and err.value.code == "tools_not_supported"
    # The ChatML fallback of a model without a template is not the model's own format either.
    with pytest.raises(ApiError):
        tooling.apply(job.extras, job.sampling, {"chat_template": "<tool_call>", "chat_template_source": "fallback"})


def test_response_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    job = chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    sampling = tooling.apply(job.extras, job.sampling, load_info("google-gemma-2-2b-it.jinja"))
    assert sampling.grammar_schemas == {"root": schema} and not sampling.grammar_lazy
    job = chat(response_format={"type": "json_object"})
    assert tooling.apply(job.extras, job.sampling, {}).grammar_schemas == {"root": {"type": "object"}}
    job = chat(response_format={"type": "text"})
    assert not tooling.apply(job.extras, job.sampling, {}).grammar_schemas


@pytest.mark.parametrize("template", ["Qwen-Qwen3-0.6B.jinja", "openai-gpt-oss-120b.jinja",
                                      "meta-llama-Llama-3.3-70B-Instruct.jinja",
                                      "mistralai-Mistral-Nemo-Instruct-2407.jinja"])
def test_tools_with_response_format(template: str) -> None:
    """Taken together: a call or the answer in the schema, constrained from the first token."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    job = chat(tools=[TOOL], response_format=fmt)
    sampling = tooling.apply(job.extras, job.sampling, load_info(template))
    assert not sampling.grammar_lazy and sampling.grammar_schemas["tc-answer"] == schema
    assert job.extras.family is not None and "tc-answer" in sampling.grammar
    off = chat(tools=[TOOL], response_format=fmt, tool_choice="none")
    assert tooling.apply(off.extras, off.sampling, load_info(template)).grammar_schemas == {"root": schema}
    assert off.extras.family is None
    required = chat(tools=[TOOL], response_format=fmt, tool_choice="required")
    assert "tc-answer" not in tooling.apply(required.extras, required.sampling, load_info(template)).grammar_schemas


def test_a_tools_unenforceable_keywords_are_left_to_the_client() -> None:
    """Agents' tool schemas carry formats, unanchored patterns and keywords no grammar enforces (Claude Code's
    "format": "uri", Pydantic's emails): the request is taken, the model reads the whole schema in its template,
    and the call's grammar keeps the schema's shape without them."""
    from hisho.core.formats.schema import loosen

    params = {"type": "object", "required": ["url"], "properties": {
        "url": {"type": "string", "format": "uri"}, "email": {"type": "string", "format": "email", "maxLength": 80},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "[a-z]+"}, "uniqueItems": True},
        "size": {"type": "number", "maximum": 4.5}, "n": {"type": "integer", "minimum": 1, "maximum": 9}}}
    job = chat(tools=[{"type": "function", "function": {"name": "fetch", "parameters": params}}])
    assert job.extras.tools is not None and job.extras.tools[0]["function"]["parameters"] == params
    assert loosen(params) == {"type": "object", "required": ["url"], "properties": {
        "url": {"type": "string"}, "email": {"type": "string", "maxLength": 80}, "tags": {"type": "array", "items": {"type": "string"}},
        "size": {"type": "number"}, "n": {"type": "integer", "minimum": 1, "maximum": 9}}}
