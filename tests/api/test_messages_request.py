"""Anthropic's Messages request as the chat job every wire format shares (hisho.api.messages_request), and its
errors in Anthropic's shape (hisho.api.messages). No server, no engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hisho.api import messages, tooling
from hisho.api.errors import ApiError
from hisho.api.messages_request import parse

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"
TOOL = {"name": "get_weather", "description": "Weather now.", "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"}}
USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}


def job(**fields: Any) -> Any:
    return parse({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **fields}, {}, 64)


def test_one_conversation_in_the_template_s_form() -> None:
    j = job(system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "Be kind."}],
            tools=[TOOL], tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stop_sequences=["END"], temperature=0.2, top_k=5,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.",
                                                         "signature": "x"},
                                                        {"type": "text", "text": "Looking."}, USE]},
                      {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                           "content": [{"type": "text", "text": "no network"}]},
                          {"type": "text", "text": "Try again."}]}])
    assert j.kind == "chat" and not j.stream and j.stops == ("END",)
    assert j.messages == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Looking.", "reasoning_content": "Look it up.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": "Error: no network", "tool_call_id": "toolu_1", "name": "get_weather"},
        {"role": "user", "content": "Try again."}]
    assert j.extras.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object"}, "description": "Weather now."}}]
    assert (j.extras.tool_choice, j.extras.parallel) == ("required", False)
    assert (j.sampling.temperature, j.sampling.top_k, j.sampling.max_tokens, j.sampling.stop) == (0.2, 5, 64, ["END"])
    named = job(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"})
    assert (named.extras.tool_choice, named.extras.forced) == ("function", "get_weather")
    assert job(tools=[TOOL], tool_choice={"type": "none"}).extras.tool_choice == "none"


def test_thinking_reaches_the_template_s_own_control() -> None:
    qwen = {"reasoning": {"kind": "think", "toggle": "enable_thinking", "efforts": []}}
    gpt_oss = {"reasoning": {"kind": "harmony", "toggle": "", "efforts": ["low", "medium", "high"]}}
    for thinking, kwargs in ((None, {"enable_thinking": False}), ({"type": "disabled"}, {"enable_thinking": False}),
                             ({"type": "enabled", "budget_tokens": 2048}, {"enable_thinking": True}),
                             ({"type": "adaptive"}, {"enable_thinking": True})):
        j = job(max_tokens=4096, **({"thinking": thinking} if thinking else {}))
        tooling.apply(j.extras, j.sampling, qwen)
        assert j.extras.template_kwargs == kwargs
    for budget, effort in ((1024, "low"), (8000, "medium"), (30000, "high")):
        j = job(max_tokens=32000, thinking={"type": "enabled", "budget_tokens": budget})
        tooling.apply(j.extras, j.sampling, gpt_oss)
        assert j.extras.template_kwargs == {"reasoning_effort": effort}
    j = job(output_config={"effort": "max"})
    tooling.apply(j.extras, j.sampling, gpt_oss)
    assert j.extras.template_kwargs == {"reasoning_effort": "high"}
    plain = job()  # a model that does not reason gets nothing
    tooling.apply(plain.extras, plain.sampling, {})
    assert plain.extras.template_kwargs is None


def test_tools_get_the_family_s_grammar() -> None:
    j = job(tools=[TOOL], tool_choice={"type": "any"})
    info = {"chat_template": (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8"),
            "chat_template_source": "gguf"}
    sampling = tooling.apply(j.extras, j.sampling, info)
    assert j.extras.family == "hermes" and sampling.grammar and not sampling.grammar_lazy


@pytest.mark.parametrize(("fields", "param"), [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"model": ""}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].source"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]},
     "messages[0].content[0].source"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                            "data": "not base64!"}}]}]},
     "messages[0].content[0].source.data"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure"}]}, "messages[1]"),
    ({"messages": [{"role": "user", "content": [USE]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{**USE, "input": [1]}]},
                   {"role": "user", "content": "ok"}]}, "messages[1].content[0].input"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [USE]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                 "content": [{"type": "image", "source": {}}]}]}]},
     "messages[2].content[0].content[0].type"),
    ({"system": 3}, "system"),
    ({"system": [{"type": "image"}]}, "system[0]"),
    ({"tools": [{"name": "x"}]}, "tools[0].input_schema"),
    ({"tools": [{"input_schema": {}}]}, "tools[0].name"),
    ({"tools": [TOOL, TOOL]}, "tools[1].name"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "other"}}, "tool_choice.name"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking.budget_tokens"),  # not below max_tokens
    ({"thinking": {"type": "always"}}, "thinking"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"stop_sequences": [""]}, "stop_sequences"),
    ({"temperature": 1.5}, "temperature"),
    ({"top_p": "high"}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"stream": "yes"}, "stream"),
    ({"mcp_servers": [{"url": "https://x"}]}, "mcp_servers"),
    ({"output_config": {"effort": "huge"}}, "output_config.effort"),
    ({"output_config": {"format": {"type": "yaml"}}}, "output_config.format"),
])
def test_bad_requests_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        job(**fields)
    assert err.value.status == 400 and err.value.param == param
    body = messages.error_body(err.value)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(param + ":")


def test_count_takes_no_max_tokens() -> None:
    j = parse({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}, {}, 64, count=True)
    assert j.messages == [{"role": "user", "content": "Hi"}] and not j.stream


@pytest.mark.parametrize(("error", "status", "kind"), [
    (ApiError(401, "no key"), 401, "authentication_error"),
    (ApiError(404, "no model", param="model"), 404, "not_found_error"),
    (ApiError(413, "too big", code="request_too_large"), 413, "request_too_large"),
    (ApiError(429, "slow down", type_="rate_limit_error"), 429, "rate_limit_error"),
    (ApiError(503, "busy", type_="server_error", code="engine_busy", headers={"Retry-After": "3"}), 529,
     "overloaded_error"),
    (ApiError(503, "crashed", type_="server_error", code="engine_crashed"), 503, "api_error"),
    (ApiError(500, "oops", type_="server_error"), 500, "api_error"),
])
def test_errors_in_anthropic_s_shape(error: ApiError, status: int, kind: str) -> None:
    response = messages.error_response(error)
    assert response.status_code == status
    assert messages.error_body(error)["error"]["type"] == kind
    if error.headers:
        assert response.headers["retry-after"] == "3"


def test_a_base64_image_block_becomes_a_checked_image_part() -> None:
    import base64
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 10, 200)).save(buf, "JPEG")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    job = parse({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": data}},
        {"type": "text", "text": "What is this?"}]}]}, {}, 64)
    parts = job.messages[0]["content"]
    assert [p["type"] for p in parts] == ["image", "text"]
    assert base64.b64decode(parts[0]["data"]).startswith(b"\x89PNG")   # re-encoded as a plain PNG
