"""Anthropic's Messages API through ``hisho serve`` with the real ``anthropic`` SDK, called as its users call it.

The models are the bundled weights with real chat templates and each family's special tokens
(tests/fixtures/tool_models.py): Qwen3's (Hermes ``<tool_call>`` calls, ``<think>`` reasoning with an
``enable_thinking`` switch) and GPT-OSS's (harmony: calls on the commentary channel, analysis as thinking). Replies
are forced through the engine (test hook ``force_text``), since a 135M model calls no tools on its own.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from PIL import Image

from hisho.core.kv.format import SUFFIX
from tests.api.conftest import Served, stop_serve
from tests.api.test_tools import serve_with_hooks

pytestmark = pytest.mark.timeout(900)

SYSTEM = "You are the weather desk of a newspaper.\n" + "\n".join(
    f"Rule {i}: give the temperature in the unit the reader asked for, and name the city." for i in range(12))
WEATHER = {"name": "get_weather", "description": "The weather in a city now.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"]}}
TIME = {"name": "get_time", "description": "The local time in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                         "required": ["city"]}}
TOOLS = [WEATHER, TIME]
QUESTION = "What is the weather and the time in Paris, and the weather in Oslo?"
# The three calls of the loop, then the answer.
CALLS = [("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {"city": "Paris"}),
         ("get_weather", {"city": "Oslo", "unit": "celsius"})]
RESULTS = ['{"temperature": 21}', '{"time": "14:05"}', '{"temperature": 3}']
ANSWER = "Paris: 21 degrees at 14:05. Oslo: 3 degrees."
THOUGHT = "The user wants the weather."


def call_text(family: str, name: str, args: dict[str, Any]) -> str:
    if family == "hermes":
        return "Let me look.\n<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    return (f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>commentary "
            f"to=functions.{name} <|constrain|>json<|message|>{json.dumps(args)}<|call|>")


def answer_text(family: str, text: str) -> str:
    if family == "hermes":
        return text
    return f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>final<|message|>{text}<|return|>"


@pytest.fixture(scope="module")
def servers(family_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """One server per family, started when a test first asks for it."""
    started: dict[str, Served] = {}

    class Lazy(dict[str, Served]):
        def __missing__(self, family: str) -> Served:
            started[family] = serve_with_hooks(tmp_path_factory.mktemp(f"messages_{family}"), family_files[family])
            self[family] = started[family]
            return started[family]

    yield Lazy()
    for served in started.values():
        stop_serve(served)


@pytest.fixture(scope="module")
def hermes(servers: dict[str, Served]) -> Served:
    return servers["hermes"]


def sdk(served: Served, **options: Any) -> anthropic.Anthropic:
    """The client as Claude Code's users point it here: the server's root (the SDK adds /v1/messages)."""
    options.setdefault("api_key", served.key)
    return anthropic.Anthropic(base_url=served.url.removesuffix("/v1"), max_retries=0, timeout=300, **options)


def forced(text: str) -> dict[str, Any]:
    return {"hisho_test_hooks": {"force_text": text}}


def ask(text: str = "Hi") -> list[Any]:
    return [{"role": "user", "content": text}]


def test_create_text_stop_reasons_and_usage(hermes: Served) -> None:
    c = sdk(hermes)
    m = c.messages.create(model=hermes.model, max_tokens=64, system=SYSTEM, messages=ask(),
                          extra_body=forced("Hello there, reader."))
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_") and m.model == hermes.model
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "Hello there, reader."  # type: ignore[union-attr]
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    u = m.usage
    assert u.output_tokens > 0 and u.cache_creation_input_tokens == 0
    # Every prompt token was either read or restored, and count_tokens counts the same prompt.
    total = u.input_tokens + (u.cache_read_input_tokens or 0)
    assert c.messages.count_tokens(model=hermes.model, system=SYSTEM, messages=ask()).input_tokens == total
    # The same request again: its prompt is in the sequence's cells, so it is restored, not read (but for the
    # generation prompt: the cells hold the reply as the next request renders it, Qwen3's empty thought gone).
    again = c.messages.create(model=hermes.model, max_tokens=64, system=SYSTEM, messages=ask(),
                              extra_body=forced("Hello there, reader."))
    assert again.usage.input_tokens + (again.usage.cache_read_input_tokens or 0) == total
    assert again.usage.input_tokens < 16, again.usage

    short = c.messages.create(model=hermes.model, max_tokens=2, messages=ask(), extra_body=forced("one two three four"))
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2
    cut = c.messages.create(model=hermes.model, max_tokens=64, messages=ask(), stop_sequences=["STOP", "never"],
                            extra_body=forced("Before the STOP after"))
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == "STOP"
    assert cut.content[0].text == "Before the "  # type: ignore[union-attr]
    # Bearer works as well as x-api-key (Claude Code's ANTHROPIC_AUTH_TOKEN); a max_tokens past the context is
    # a ceiling, not a refusal (the SDK's users send their own models' limits).
    bearer = sdk(hermes, api_key=None, auth_token=hermes.key)
    big = bearer.messages.create(model=hermes.model, max_tokens=32000, messages=ask(), extra_body=forced("Yes."))
    assert big.content[0].text == "Yes."  # type: ignore[union-attr]


def test_stream_events_and_final_message(hermes: Served) -> None:
    c = sdk(hermes)
    with c.messages.stream(model=hermes.model, max_tokens=64, messages=ask(),
                           extra_body=forced("Streaming works, word by word.")) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_start") == 1 and kinds.count("content_block_stop") == 1
    assert kinds.count("message_delta") == 1 and kinds.count("text") >= 2
    assert final.content[0].text == "Streaming works, word by word."  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 5
    with c.messages.stream(model=hermes.model, max_tokens=64, messages=ask(),
                           extra_body=forced("abc")) as stream:
        assert "".join(stream.text_stream) == "abc"


def _loop(c: anthropic.Anthropic, served: Served, family: str) -> list[anthropic.types.Message]:
    """Three tool calls, each result sent back, then the answer: an agent's loop, the history resent each time."""
    history: list[Any] = ask(QUESTION)
    replies = []
    for turn, text in enumerate([*(call_text(family, n, a) for n, a in CALLS), answer_text(family, ANSWER)]):
        body: dict[str, Any] = {"model": served.model, "max_tokens": 300, "system": SYSTEM, "tools": TOOLS,
                                "messages": history, "extra_body": forced(text)}
        if turn == 1:  # one turn streamed: the call arrives as input_json_delta
            with c.messages.stream(**body) as stream:
                deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
                m = stream.get_final_message()
            assert "input_json_delta" in deltas
        else:
            m = c.messages.create(**body)
        replies.append(m)
        uses = [b for b in m.content if b.type == "tool_use"]
        if turn == len(CALLS):  # count_tokens counts the prompt the reply read, tools and history included
            counted = c.messages.count_tokens(model=served.model, system=SYSTEM, tools=TOOLS, messages=history)
            assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
            break
        assert m.stop_reason == "tool_use" and len(uses) == 1
        assert (uses[0].name, uses[0].input) == CALLS[turn]
        history = [*history, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                 "content": RESULTS[turn]}]}]
    return replies


@pytest.mark.parametrize("family", ["hermes", "harmony"])
def test_tool_loop_reads_only_what_is_new(servers: dict[str, Served], family: str) -> None:
    served = servers[family]
    replies = _loop(sdk(served), served, family)
    final = replies[-1]
    assert final.stop_reason == "end_turn" and [b for b in final.content if b.type == "text"][0].text == ANSWER
    if family == "hermes":  # the text before a call is the reply's text
        assert [b.type for b in replies[0].content] == ["text", "tool_use"]
        assert replies[0].content[0].text == "Let me look."  # type: ignore[union-attr]
    else:  # harmony's analysis is the thinking, before the call
        assert [b.type for b in replies[0].content] == ["thinking", "tool_use"]
        assert replies[0].content[0].thinking == THOUGHT  # type: ignore[union-attr]
    # Each later turn restores the system prompt, tools and history: it reads the last call as the template
    # writes it back, the result and the new turn's header (docs/reasoning.md "Tool calls and reuse"), nothing
    # from before the call.
    print([(r.usage.input_tokens, r.usage.cache_read_input_tokens) for r in replies])
    for before, after in zip(replies, replies[1:]):
        whole = before.usage.input_tokens + (before.usage.cache_read_input_tokens or 0)
        assert (after.usage.cache_read_input_tokens or 0) >= whole - 16, (before.usage, after.usage)
        assert after.usage.input_tokens < 100, after.usage
    # The prompts went to the disk prompt cache too, as a chat request's do.
    assert [p for p in served.home.rglob(f"*{SUFFIX}") if p.is_file()]


def test_thinking_blocks_follow_the_switch(hermes: Served) -> None:
    c = sdk(hermes)
    reply = f"<think>\n{THOUGHT}\n</think>\n\nHello!"
    on = {"type": "enabled", "budget_tokens": 1024}
    m = c.messages.create(model=hermes.model, max_tokens=2000, thinking=on, messages=ask(), extra_body=forced(reply))
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == THOUGHT and m.content[1].text.strip() == "Hello!"  # type: ignore[union-attr]
    with c.messages.stream(model=hermes.model, max_tokens=2000, thinking=on, messages=ask(),
                           extra_body=forced(reply)) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas.index("thinking_delta") < deltas.index("text_delta")
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking.strip() == THOUGHT  # type: ignore[union-attr]
    # The switch reaches the template (Qwen3's enable_thinking): thinking off renders a closed, empty thought.
    counts = {kind: c.messages.count_tokens(model=hermes.model, messages=ask(), thinking=t).input_tokens
              for kind, t in (("on", on), ("off", {"type": "disabled"}))}
    assert counts["off"] > counts["on"]
    # A thinking block sent back is the assistant turn's reasoning; the request is taken.
    back = c.messages.create(model=hermes.model, max_tokens=2000, thinking=on, extra_body=forced("Fine."), messages=[
        *ask(), {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        *ask("And now?")])
    assert back.content[-1].text == "Fine."  # type: ignore[union-attr]


def _refused(c: anthropic.Anthropic, served: Served, **fields: Any) -> str:
    body = {"model": served.model, "max_tokens": 16, "messages": ask(), **fields}
    with pytest.raises(anthropic.BadRequestError) as err:
        c.post("/v1/messages", cast_to=anthropic.types.Message, body=body)
    assert err.value.type == "invalid_request_error"
    return str(err.value.api_message)


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (1, 2, 3)).save(buf, "PNG")
    return buf.getvalue()


def test_bad_requests_name_the_field(hermes: Served) -> None:
    c = sdk(hermes)
    use = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris", "unit": "celsius"}}
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "21"}
    assert "max_tokens" in _refused(c, hermes, max_tokens=None)
    assert "messages[0].content[0].type" in _refused(c, hermes, messages=[
        {"role": "user", "content": [{"type": "video", "url": "x"}]}])
    msg = _refused(c, hermes, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert "messages[0].content[0].source.data" in msg and "not an image" in msg
    png = base64.b64encode(_png()).decode("ascii")   # a good image, on a model without a projector
    assert "cannot see images" in _refused(c, hermes, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}])
    msg = _refused(c, hermes, tools=TOOLS, messages=[
        *ask(), {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{**result, "tool_use_id": "call_9"}]}])
    assert "messages[2].content[0].tool_use_id" in msg and "call_9" in msg
    assert "messages[1].content[0].input" in _refused(c, hermes, tools=TOOLS, messages=[
        *ask(), {"role": "assistant", "content": [{**use, "input": "Paris"}]}, {"role": "user", "content": [result]}])
    bad_schema = {"name": "lookup", "input_schema": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}}
    assert "input_schema" in _refused(c, hermes, tools=[bad_schema], tool_choice={"type": "any"})
    assert "tools[0].type" in _refused(c, hermes, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert "tool_choice.name" in _refused(c, hermes, tools=TOOLS, tool_choice={"type": "tool", "name": "nope"})
    assert "thinking.budget_tokens" in _refused(c, hermes, thinking={"type": "enabled", "budget_tokens": 10})
    assert "temperature" in _refused(c, hermes, temperature=1.5)
    assert "messages[1]" in _refused(c, hermes, messages=[*ask(), {"role": "assistant", "content": "Sure,"}])
    # The SDK's own errors for the key and the model.
    with pytest.raises(anthropic.AuthenticationError):
        sdk(hermes, api_key="wrong").messages.create(model=hermes.model, max_tokens=4, messages=ask())
    with pytest.raises(anthropic.NotFoundError) as missing:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=ask())
    assert hermes.model in str(missing.value.api_message) and "ANTHROPIC_MODEL" in str(missing.value.api_message)
    # A count with the same mistakes is refused the same way.
    with pytest.raises(anthropic.BadRequestError) as counted:
        c.messages.count_tokens(model=hermes.model, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert "not an image" in str(counted.value.api_message)


def test_a_client_leaving_mid_stream_cancels_its_reply(hermes: Served) -> None:
    root = hermes.url.removesuffix("/v1")

    def health() -> dict[str, Any]:
        return dict(httpx.get(root + "/health", timeout=30).json())

    before = health()["cancelled"]
    with sdk(hermes).messages.stream(model=hermes.model, max_tokens=900, messages=ask(),
                                     extra_body=forced("word " * 700)) as stream:
        for _ in stream.text_stream:
            break  # the first words, then the client goes
    deadline = time.monotonic() + 60
    while (h := health())["busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert h["busy"] == 0 and h["cancelled"] == before + 1
