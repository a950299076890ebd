"""The window's chat is never behind more than one step of the API's serving batch (issue 14): a window reply
sent while an API request decodes runs between two of its steps, and the API request then finishes whole.

Real engine, the window's shape: one context of 2 sequences in a unified KV cache, so the API's request and the
window's chat both use sequence 0 and the API request's cells must be rebuilt after the window's turn
(``ServingBatch.resync``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import Serve
from hisho.core.engine.protocol import LoadParams, Sampling

API_TOKENS = 96


@pytest.fixture(scope="module")
def window_engine(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(tmp_path_factory.mktemp("turn_home")))
    client = EngineClient()
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_seq_max=2))
    yield client
    client.close()
    mp.undo()


def test_a_window_reply_runs_between_two_steps_of_an_api_request(window_engine: EngineClient) -> None:
    engine = window_engine
    api = engine.serve(Serve(messages=[{"role": "user", "content": "Count from one to one hundred in words."}],
                             sampling=Sampling(temperature=0.0, max_tokens=API_TOKENS, ignore_eos=True)))
    received: list[str] = []
    some = threading.Event()

    def read() -> None:
        for ev in api:
            received.append(str(ev.get("text", "")))
            if len(received) >= 4:
                some.set()
        some.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert some.wait(300) and len(received) < API_TOKENS // 2, "the API request did not start decoding"
    before = len(received)
    window = engine.generate(messages=[{"role": "user", "content": "Say hello."}],
                             sampling=Sampling(temperature=0.0, max_tokens=8))
    result = window.collect()
    after = len(received)
    reader.join(600)
    assert result.completion_tokens > 0 and result.text
    # Its whole reply came while the API request had most of its tokens still to go: one step (plus the tokens
    # the engine's 25 ms write coalescing may still have held at the send), not the rest of the request.
    assert after - before <= 8, f"the window's reply waited for {after - before} API tokens"
    assert api.result is not None
    assert api.result.stop_reason == "length" and api.result.completion_tokens == API_TOKENS
    assert len(received) == API_TOKENS and "".join(received) == api.result.text
