"""An API request sent while the window's engine is busy (a reply held mid-way by the engine's test hook, a
summary's batch or a model load held mid-way by stopping the engine process) waits in the open: ``/health`` shows
it queued and what the engine works on; past the wait bound it is refused with 503 ``engine_busy`` and
``Retry-After`` (never a socket left open with nothing on it); with a bound that is long enough it streams its
answer once the engine is free."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hisho.api.launch import api_server
from hisho.api.server import ApiServer
from hisho.bench.shapes import model_file
from hisho.core import services
from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import BatchGenerate, Prompt
from hisho.core.engine.protocol import Sampling
from tests.faults import EngineFreeze, LoadFreeze

MESSAGES: Any = [{"role": "user", "content": "Say hello."}]


@pytest.fixture()
def held() -> Iterator[tuple[services.Services, EngineClient]]:
    """The window's services on an engine with test hooks, its engine held by a reply after its first token."""
    engine = EngineClient(test_hooks=True)
    app = services.build(None, "window", n_ctx=2048, engine=engine)
    app.load()
    stream = engine.generate(messages=MESSAGES, sampling=Sampling(max_tokens=8, temperature=0),
                             test_hooks={"hold_after_tokens": 1})
    first = threading.Event()

    def read() -> None:
        for _ in stream:
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(60), "the held reply never sent its first token"
    try:
        yield app, engine
    finally:
        engine.release_hold()
        reader.join(30)
        app.close()


def serve(app: services.Services, max_wait_s: int) -> ApiServer:
    app.settings.set("api_max_wait_s", max_wait_s)
    server = api_server(app, "k")
    server.start()
    return server


def client(server: ApiServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="k", max_retries=0, timeout=60)


def health(server: ApiServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"http://{server.host}:{server.port}/health", timeout=10).json()
    return body


def test_a_request_behind_busy_engine_is_refused_with_retry_after_once_the_bound_passes(
        held: tuple[services.Services, EngineClient]) -> None:
    app, _ = held
    server = serve(app, 2)
    try:
        model = server.backend.model_id
        for stream in (False, True):
            began = time.monotonic()
            with pytest.raises(openai.APIStatusError) as caught:
                client(server).chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, stream=stream)
            took = time.monotonic() - began
            exc = caught.value
            assert exc.status_code == 503
            assert 1 <= int(exc.response.headers["retry-after"]) <= 60
            error = exc.response.json()["error"]
            assert error["code"] == "engine_busy" and error["type"] == "server_error" and "reply" in error["message"]
            assert 2 <= took < 2 + 15  # the bound, and a margin for a loaded machine
        assert health(server)["queue"]["refused"] == 2
    finally:
        server.stop()


def test_a_waiting_request_is_shown_on_health_and_streams_once_the_engine_is_free(
        held: tuple[services.Services, EngineClient]) -> None:
    app, engine = held
    server = serve(app, 600)
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            chunks = list(client(server).chat.completions.create(
                model=server.backend.model_id, messages=MESSAGES, max_tokens=4, temperature=0, stream=True))
            answer["text"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            answer["finish"] = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        except Exception as exc:  # the assertion below says what went wrong
            answer["error"] = exc

    asker = threading.Thread(target=ask, daemon=True)
    try:
        asker.start()
        deadline = time.monotonic() + 30
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            seen = health(server)
            if seen["queue"]["waiting"] == 1 and seen["queue"]["oldest_wait_s"] > 0.3:
                break
            time.sleep(0.05)
        assert seen["queue"]["waiting"] == 1 and seen["engine"] == "reply", seen
        assert seen["queue"]["max_wait_s"] == 600
        assert asker.is_alive() and not answer  # still waiting: nothing came back yet
        engine.release_hold()
        asker.join(60)
        assert not asker.is_alive() and "error" not in answer, answer
        assert answer["text"] and answer["finish"] in ("stop", "length")
        after = health(server)
        assert after["queue"]["waiting"] == 0 and after["queue"]["refused"] == 0
    finally:
        server.stop()


def test_serve_takes_the_wait_bound_from_the_command_line(tmp_path: Path) -> None:
    from tests.api.conftest import start_serve, stop_serve

    served = start_serve(tmp_path, "--max-wait-s", "7")
    try:
        body = httpx.get(served.url.removesuffix("/v1") + "/health", timeout=10).json()
        assert body["queue"]["max_wait_s"] == 7 and body["queue"]["waiting"] == 0 and body["engine"] == "idle"
    finally:
        stop_serve(served)


def test_a_request_during_a_model_load_waits_behind_it_and_never_loads_the_model_again(tmp_path: Path) -> None:
    """The window switching models (a 1B true-shape file, held mid-file): the API request is refused once its
    bound passes, saying what runs, and it sent no second load of that model behind the first."""
    big = model_file("llama-3.2-1b", "Q4_0")
    engine = EngineClient()
    app = services.build(None, "window", n_ctx=2048, engine=engine)
    app.load()
    assert app.load_params is not None
    server = serve(app, 2)
    try:
        with LoadFreeze(engine) as freeze:
            loader = threading.Thread(target=engine.load, daemon=True,
                                      args=(dataclasses.replace(app.load_params, model_path=str(big), n_ctx=512),))
            loader.start()
            assert freeze.frozen.wait(120), "the load was never held mid-file"
            assert health(server)["engine"] == "loading a model"
            with pytest.raises(openai.APIStatusError) as caught:
                client(server).chat.completions.create(model=server.backend.model_id, messages=MESSAGES,
                                                       max_tokens=4)
            assert caught.value.status_code == 503 and "retry-after" in caught.value.response.headers
            assert "loading a model" in caught.value.response.json()["error"]["message"]
            assert [op for _, op, _ in engine.activity()].count("load") == 1
        loader.join(120)
        assert not loader.is_alive()
    finally:
        server.stop()
        app.close()


def test_a_request_behind_a_summary_batch_is_refused_saying_so() -> None:
    """The issue's case: a document summary's batch on the window's engine (held mid-prompt), an API request
    sent meanwhile. It is refused once its bound passes, naming the summary; the summary is not disturbed."""
    engine = EngineClient()
    app = services.build(None, "window", n_ctx=2048, engine=engine)
    app.load()
    server = serve(app, 2)
    text = "The quick brown fox jumps over the lazy dog. " * 40
    items = [Prompt(messages=[{"role": "user", "content": f"Part {i}. {text}"}], max_tokens=8).to_wire()
             for i in range(4)]
    done: dict[str, Any] = {}
    try:
        with EngineFreeze(engine, "batch_generate") as freeze:
            stream = engine.batch(BatchGenerate(items=items, sampling=Sampling(max_tokens=8, temperature=0),
                                                n_parallel=2, n_ctx_per_seq=1024))
            reader = threading.Thread(target=lambda: done.update(result=stream.collect()), daemon=True)
            reader.start()
            assert freeze.frozen.wait(120), "the summary was never held mid-prompt"
            assert health(server)["engine"] == "summary"
            with pytest.raises(openai.APIStatusError) as caught:
                client(server).chat.completions.create(model=server.backend.model_id, messages=MESSAGES,
                                                       max_tokens=4, stream=True)
            assert caught.value.status_code == 503 and "retry-after" in caught.value.response.headers
            assert "summary" in caught.value.response.json()["error"]["message"]
        reader.join(120)
        assert done["result"].stop_reason == "done"
    finally:
        server.stop()
        app.close()
