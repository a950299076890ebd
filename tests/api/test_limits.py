"""What one API request may cost (docs/api.md, "Limits"), against ``hisho serve`` on the bundled model: a huge
body, a prompt too long to tokenize, a client that leaves a whole reply, a client that never reads its stream,
too many requests for one key, and OpenAI's validation rules."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import N_CTX, Served, start_serve, stop_serve

MIB = 1024 * 1024
COUNT = "Count: 1, 2, 3, 4, 5,"  # greedy, the model counts on until its max_tokens


def health(served: Served) -> dict[str, Any]:
    return dict(httpx.get(served.url.removesuffix("/v1") + "/health", timeout=30).json())


def post(served: Served, path: str, body: Any, timeout: float = 120) -> httpx.Response:
    return httpx.post(served.url + path, json=body, headers={"Authorization": f"Bearer {served.key}"},
                      timeout=timeout)


def engine_rss_kib(served: Served) -> int:
    """The resident size of the engine process (the serve process's one child)."""
    children = [int(pid) for task in Path(f"/proc/{served.proc.pid}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    assert len(children) == 1, children
    for line in Path(f"/proc/{children[0]}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def wait_idle(served: Served, bound_s: float = 30) -> dict[str, Any]:
    """Poll /health until nothing is in flight (a generous bound: the box may be loaded)."""
    deadline = time.monotonic() + bound_s
    h = health(served)
    while h["busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
        h = health(served)
    return h


def big_body(model: str, mib: int) -> bytes:
    """A valid chat request of about ``mib`` MiB."""
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "word " * (mib * MIB // 5)}]}
                      ).encode()


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose limits are set in its settings: bodies up to 64 MiB, 5 s per request, no request waits
    beyond the one sequence."""
    home = tmp_path_factory.mktemp("tight_home")
    (home / "config").mkdir()
    (home / "config" / "settings.json").write_text(json.dumps(
        {"api_max_body_mb": 64, "api_request_timeout_s": 5, "api_max_queued": 0}))
    s = start_serve(home, "--parallel", "1")
    yield s
    stop_serve(s)


def test_a_50_mib_body_is_refused_at_once_and_the_engine_never_sees_it(served: Served, tight: Served) -> None:
    body = big_body(served.model, 50)
    # The default limit (8 MiB): 413 from the declared length, the body never read.
    start = time.monotonic()
    r = httpx.post(served.url + "/chat/completions", content=body, timeout=60,
                   headers={"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert time.monotonic() - start < 30
    # A limit that lets it in: the prompt is refused by its characters, before a token of it is counted.
    post(tight, "/chat/completions", {"model": tight.model, "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 2})  # the engine has loaded and answered once
    rss = engine_rss_kib(tight)
    start = time.monotonic()
    r = httpx.post(tight.url + "/chat/completions", content=body, timeout=60,
                   headers={"Authorization": f"Bearer {tight.key}", "Content-Type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert time.monotonic() - start < 30
    assert abs(engine_rss_kib(tight) - rss) < 8 * 1024  # KiB: the engine tokenized none of it
    # A chunked body (no declared length) is cut off as soon as it passes the limit.
    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), MIB):
            yield body[i:i + MIB]
    r = httpx.post(served.url + "/chat/completions", content=chunks(), timeout=60,
                   headers={"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"})
    assert r.status_code == 413


def test_deep_nesting_is_a_400(served: Served) -> None:
    nested = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(served.url + "/chat/completions", content=nested, timeout=60,
                   headers={"Authorization": f"Bearer {served.key}"})
    assert r.status_code == 400 and "deeply" in r.json()["error"]["message"]


def _open_whole(served: Served, path: str, body: dict[str, Any]) -> socket.socket:
    """Send a request on a raw socket and leave its answer unread (the client goes when it closes it)."""
    raw = json.dumps(body).encode()
    port = int(served.url.split(":")[2].split("/")[0])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"POST /v1{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {served.key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
    return sock


def test_a_whole_request_abandoned_mid_reply_frees_its_sequence(served: Served) -> None:
    before = wait_idle(served)["cancelled"]
    sock = _open_whole(served, "/completions", {"model": served.model, "prompt": COUNT, "max_tokens": 900,
                                                "temperature": 0})
    deadline = time.monotonic() + 60
    while health(served)["busy"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert health(served)["busy"] == 1
    time.sleep(0.3)  # some tokens into its 900
    sock.close()
    # Cancelled, not run to its end: "cancelled" counts it, and the sequence is free for the next request.
    h = wait_idle(served)
    assert h["busy"] == 0 and h["cancelled"] == before + 1
    r = post(served, "/completions", {"model": served.model, "prompt": "Hello", "max_tokens": 2})
    assert r.status_code == 200


def test_a_client_that_never_reads_is_cut_off_by_the_time_limit(tight: Served) -> None:
    before = wait_idle(tight)["cancelled"]
    sock = _open_whole(tight, "/completions", {"model": tight.model, "prompt": COUNT, "max_tokens": 1000,
                                               "temperature": 0, "stream": True})
    try:
        # It never reads; after its 5 s the engine's sequence is cancelled all the same.
        h = wait_idle(tight, bound_s=120)
        assert h["busy"] == 0 and h["cancelled"] == before + 1
    finally:
        sock.close()
    r = post(tight, "/completions", {"model": tight.model, "prompt": COUNT, "max_tokens": 1000, "temperature": 0})
    assert r.status_code == 504 and r.json()["error"]["code"] == "request_timeout", r.text[:300]


def test_too_many_requests_for_one_key_get_429_with_retry_after(tight: Served) -> None:
    wait_idle(tight)
    first: dict[str, Any] = {}

    def long() -> None:
        first["r"] = post(tight, "/completions", {"model": tight.model, "prompt": COUNT, "max_tokens": 300,
                                                  "temperature": 0})

    t = threading.Thread(target=long)
    t.start()
    deadline = time.monotonic() + 60
    while health(tight)["busy"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    r = post(tight, "/completions", {"model": tight.model, "prompt": "Hi", "max_tokens": 2})
    t.join(120)
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(r.headers["Retry-After"]) >= 1
    assert first["r"].status_code in (200, 504)
    assert post(tight, "/completions", {"model": tight.model, "prompt": "Hi", "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize(("path", "change", "param"), [
    ("/chat/completions", {"messages": [{"role": "bogus", "content": "x"}]}, "messages[0].role"),
    ("/chat/completions", {"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ("/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": None}]},
     "messages[1].content"),
    ("/chat/completions", {"n": 2}, "n"),
    ("/chat/completions", {"stop": ["", "x"]}, "stop"),
    ("/chat/completions", {"stop": ""}, "stop"),
    ("/chat/completions", {"max_tokens": 100_000_000}, "max_tokens"),
    ("/chat/completions", {"max_completion_tokens": N_CTX}, "max_completion_tokens"),
    ("/completions", {"n": 3}, "n"),
    ("/completions", {"best_of": 2}, "best_of"),
    ("/completions", {"max_tokens": 100_000_000}, "max_tokens"),
    ("/completions", {"prompt": "word " * (N_CTX + 50)}, "prompt"),          # too many tokens (the engine counts)
    ("/completions", {"prompt": "word " * (2 * N_CTX) * 5}, "prompt"),      # too many characters (never counted)
])
def test_openai_validation(served: Served, path: str, change: dict[str, Any], param: str) -> None:
    body: dict[str, Any] = {"model": served.model, "max_tokens": 4}
    body.update({"messages": [{"role": "user", "content": "Hi"}]} if path == "/chat/completions" else
                {"prompt": "Hi"})
    body.update(change)
    r = post(served, path, body)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == param


def test_developer_role_is_a_system_message(served: Served) -> None:
    r = post(served, "/chat/completions", {"model": served.model, "max_tokens": 4, "messages": [
        {"role": "developer", "content": "Answer briefly."}, {"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
