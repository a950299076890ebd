"""The Responses request's translation into the chat job (no server): items into the template's messages, one
assistant turn per model turn, what a continuation starts from, and the fields errors name."""

from __future__ import annotations

from typing import Any

import pytest

from hisho.api.errors import ApiError
from hisho.api.responses_input import parse

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}


def job_of(body: dict[str, Any], previous: dict[str, Any] | None = None) -> Any:
    return parse({"model": "m", **body}, previous, {}, 64)


def test_items_become_the_template_messages() -> None:
    r = job_of({"instructions": "Be brief.", "tools": [TOOL], "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Think."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        CALL, {**CALL, "call_id": "call_2"},
        {"type": "function_call_output", "call_id": "call_1", "output": "21"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "22"}]}]})
    calls = [{"id": i, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
             for i in ("call_1", "call_2")]
    assert r.job.messages == [
        {"role": "system", "content": "Be brief."}, {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Think.", "tool_calls": calls},
        {"role": "tool", "content": "21", "tool_call_id": "call_1", "name": "get_weather"},
        {"role": "tool", "content": "22", "tool_call_id": "call_2", "name": "get_weather"}]
    assert r.job.extras.tools == [{"type": "function", "function": {"name": "get_weather",
                                                                    "parameters": {"type": "object"}, "strict": True}}]
    assert r.history == r.job.messages[1:]   # what is kept leaves the instructions out


def test_a_continuation_starts_from_the_kept_conversation() -> None:
    kept = {"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}
    r = job_of({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "21"}],
                "instructions": "New.", "previous_response_id": "resp_1"}, kept)
    assert r.job.messages == [{"role": "system", "content": "New."}, *kept["messages"],
                              {"role": "tool", "content": "21", "tool_call_id": "call_1", "name": "get_weather"}]
    assert r.previous_id == "resp_1"


def test_fields_map_to_the_chat_job() -> None:
    r = job_of({"input": "Hi", "max_output_tokens": 7, "temperature": 0.5, "stream": None,
                "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                "reasoning": {"effort": "low"}})
    assert r.job.sampling.max_tokens == 7 and r.job.max_tokens_param == "max_output_tokens"
    assert r.job.sampling.temperature == 0.5 and not r.job.stream
    assert r.job.extras.json_output and r.job.extras.schema == {"type": "object"}
    assert r.job.extras.reasoning_effort == "low"


@pytest.mark.parametrize("body, param", [
    ({"input": "Hi", "temperature": 5}, "temperature"),
    ({"input": "Hi", "reasoning": {"effort": 3}}, "reasoning.effort"),
    ({"input": "Hi", "tool_choice": {"type": "function", "name": "nowhere"}, "tools": [TOOL]}, "tool_choice"),
    ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
    ({"input": [CALL, {"type": "function_call_output", "call_id": "call_9", "output": "x"}]}, "input[1].call_id"),
])
def test_errors_name_the_responses_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as err:
        job_of(body)
    assert err.value.status == 400 and err.value.param == param


def _png_url() -> str:
    import base64
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 10, 10)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def test_input_images_become_checked_image_parts_and_survive_a_continuation() -> None:
    r = job_of({"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                                       {"type": "input_image", "image_url": _png_url()}]}]})
    parts = r.job.messages[0]["content"]
    assert [p["type"] for p in parts] == ["text", "image"] and parts[1]["data"]   # a PNG Pillow wrote
    stored = {"messages": [{"role": m["role"], "content": [dict(p) for p in m["content"]]} for m in r.history]}
    again = job_of({"input": "And now?"}, stored)   # the kept record, read back as plain JSON
    assert again.job.messages[0]["content"][1]["data"] == parts[1]["data"]
    for part, words in (({"type": "input_image", "image_url": "https://x/y.png"}, "fetching is off"),
                        ({"type": "input_image", "file_id": "file_1"}, "file ids are not supported"),
                        ({"type": "input_image", "image_url": "data:image/png;base64,AAAA"}, "not an image Hisho reads")):
        with pytest.raises(ApiError, match=words):
            job_of({"input": [{"role": "user", "content": [part]}]})
    with pytest.raises(ApiError, match="user messages only"):
        job_of({"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": _png_url()}]},
                          {"role": "user", "content": "Hi"}]})
    with pytest.raises(ApiError, match="must be a text part"):   # an engine part from a client is not taken as checked
        job_of({"input": [{"role": "user", "content": [{"type": "image", "data": "eA=="}]}]})
