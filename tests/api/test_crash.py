"""The API on a background thread (as the window runs it), on an engine that crashes mid-stream."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hisho.api.backend import Backend
from hisho.api.server import ApiServer
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.errors import EngineCrashed


@pytest.fixture()
def api(default_model_path: Path) -> Iterator[tuple[ApiServer, EngineClient]]:
    engine = EngineClient(test_hooks=True)
    engine.load(dataclasses.replace(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_seq_max=2),
                                    kv_unified=False))
    server = ApiServer(Backend(engine, "m", {}, 256), "k", port=0)
    server.start()
    yield server, engine
    server.stop()
    engine.close()


def test_engine_crash_mid_stream_is_503_and_the_next_request_restarts_it(
        api: tuple[ApiServer, EngineClient]) -> None:
    server, engine = api
    c = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0, timeout=120)
    long = {"model": "m", "prompt": "Count: 1, 2, 3, 4, 5,", "max_tokens": 1500, "temperature": 0}
    whole: dict[str, Any] = {}

    def not_streamed() -> None:
        r = httpx.post(server.url + "/completions", json=long, headers={"Authorization": "Bearer k"}, timeout=120)
        whole.update(status=r.status_code, body=r.json())

    t = threading.Thread(target=not_streamed)
    t.start()
    stream = c.completions.create(**long, stream=True)
    events = iter(stream)
    next(events)
    with pytest.raises(EngineCrashed):
        engine.call("abort")  # the engine's test hook: ggml_abort() between two steps of the serving batch
    with pytest.raises(openai.APIError) as err:
        list(events)
    assert "engine" in str(err.value.message)
    t.join(60)
    assert whole["status"] == 503 and whole["body"]["error"]["code"] == "engine_crashed"
    r = c.completions.create(model="m", prompt="Hello", max_tokens=4, temperature=0)
    assert r.usage is not None and r.usage.completion_tokens > 0
    assert engine.restarts == 1
