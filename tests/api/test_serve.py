"""``hisho serve`` with the real ``openai`` client and raw SSE: shapes, usage, errors, keys, cancellation,
parallel streams."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.api.conftest import N_CTX, Served


def client(served: Served, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key=key or served.key, max_retries=0, timeout=300)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def health(served: Served) -> dict[str, Any]:
    return dict(httpx.get(served.url.removesuffix("/v1") + "/health", timeout=30).json())


def test_models_and_chat_with_usage(served: Served) -> None:
    c = client(served)
    assert [m.id for m in c.models.list().data] == [served.model]
    r = c.chat.completions.create(model=served.model, messages=ask("Say hello."), max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details is not None
    # The same prompt again: the sequence kept its cells, so all but the last prompt token are reused.
    again = c.chat.completions.create(model=served.model, messages=ask("Say hello."), max_tokens=8, temperature=0)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    assert again.choices[0].message.content == r.choices[0].message.content


def test_stream_equals_whole_reply_and_reports_usage(served: Served) -> None:
    c = client(served)
    whole = c.chat.completions.create(model=served.model, messages=ask("Name three colours."), max_tokens=24,
                                      temperature=0, seed=1)
    stream = c.chat.completions.create(model=served.model, messages=ask("Name three colours."), max_tokens=24,
                                       temperature=0, seed=1, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_stop_max_tokens_and_completions(served: Served) -> None:
    c = client(served)
    r = c.completions.create(model=served.model, prompt="1, 2, 3, 4, 5, 6,", max_tokens=30, temperature=0,
                             stop=[" 9"])
    text = r.choices[0].text
    assert r.choices[0].finish_reason == "stop" and " 9" not in text and "8" in text
    r = c.completions.create(model=served.model, prompt="1, 2, 3, 4, 5, 6,", max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage is not None and r.usage.completion_tokens == 3
    # Sampling with a seed is repeatable; temperature and top_p are accepted.
    a, b = (c.chat.completions.create(model=served.model, messages=ask("Tell a joke."), max_tokens=12,
                                      temperature=1.0, top_p=0.9, seed=7).choices[0].message.content
            for _ in range(2))
    assert a == b


def test_raw_sse(served: Served) -> None:
    body = {"model": served.model, "messages": ask("Hi"), "max_tokens": 5, "stream": True}
    with httpx.stream("POST", served.url + "/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {served.key}"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"


def test_wrong_or_missing_key_is_refused(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError) as err:
        client(served, key="wrong").models.list()
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
    r = httpx.post(served.url + "/chat/completions", json={"model": served.model, "messages": ask("x")})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert health(served)["status"] == "ok"  # the only route without a key


def test_bad_requests_get_openai_errors(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.key}"}
    r = httpx.post(served.url + "/chat/completions", content=b"{not json", headers=headers)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError) as nf:
        client(served).chat.completions.create(model="gpt-4o", messages=ask("x"))
    assert nf.value.code == "model_not_found"
    long = "word " * (N_CTX + 50)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as br:
            out = client(served).chat.completions.create(model=served.model, messages=ask(long), stream=stream)
            list(out)  # type: ignore[call-overload]
        assert br.value.code == "context_length_exceeded"
    for bad in ({"model": served.model}, {"model": served.model, "messages": ask("x"), "temperature": "hot"},
                {"model": served.model, "messages": ask("x"), "max_tokens": 0}, [1, 2]):
        r = httpx.post(served.url + "/chat/completions", json=bad, headers=headers)
        assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert "Traceback" not in r.text
    assert httpx.get(served.url + "/nope", headers=headers).status_code == 404


def test_client_disconnect_cancels_its_sequence(served: Served) -> None:
    body = {"model": served.model, "prompt": "Count: 1, 2, 3, 4, 5,", "max_tokens": 900, "stream": True,
            "temperature": 0}
    cancelled = health(served)["cancelled"]
    with httpx.stream("POST", served.url + "/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {served.key}"}) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in got)
        assert health(served)["busy"] == 1
    # Closed after a few tokens of a 900-token reply: the engine's sequence ends at once.
    deadline = time.monotonic() + 20
    while health(served)["busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert health(served)["busy"] == 0
    assert health(served)["cancelled"] == cancelled + 1  # not "length": it did not run to its end


def test_eight_concurrent_streams_equal_each_alone(served: Served) -> None:
    c = client(served)
    prompts = [f"Write one sentence about the number {i}." for i in range(8)]

    def run(p: str) -> str:
        out = c.chat.completions.create(model=served.model, messages=ask(p), max_tokens=24, temperature=0,
                                        stream=True)
        return "".join(ch.choices[0].delta.content or "" for ch in out if ch.choices)

    alone = [run(p) for p in prompts]
    together: list[str | None] = [None] * 8
    peak = [0]

    def worker(i: int) -> None:
        together[i] = run(prompts[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], int(health(served)["busy"]))
        time.sleep(0.01)
    assert together == alone
    assert peak[0] > 1  # they really ran at the same time (4 sequences, the rest queued)
