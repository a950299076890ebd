"""Reading a long prompt reports how far it is and can be stopped between batches: "progress" events of
``generate`` and ``prefill`` (the window's "Reading your message · 37 %" and its Stop)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Progress, Sampling
from tests.faults import EngineFreeze

N_BATCH = 32  # small batches: a 1,500-token prompt is read in ~47 of them


@pytest.fixture(scope="module")
def small_batches(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(tmp_path_factory.mktemp("progress_home")))
    client = EngineClient()
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_batch=N_BATCH, n_ubatch=N_BATCH))
    yield client
    client.close()
    mp.undo()


def long_prompt(engine: EngineClient, words: int = 500) -> list[dict[str, str]]:
    text = " ".join(f"item{i % 97}" for i in range(words))
    return [{"role": "user", "content": "Summarize this list: " + text}]


def wait_progress(engine: EngineClient, busy: threading.Thread, timeout: float = 120.0) -> Progress | None:
    deadline = time.monotonic() + timeout
    while busy.is_alive() and time.monotonic() < deadline:
        seen = engine.progress()
        if seen is not None:
            return seen
        time.sleep(0.002)
    return None


def test_generate_reports_reading_progress_before_the_first_token(small_batches: EngineClient) -> None:
    engine = small_batches
    engine.seq_rm(0, 0)
    messages = long_prompt(engine)
    n_prompt = engine.count_tokens(messages=messages)
    assert n_prompt > 20 * N_BATCH
    stream = engine.generate(messages=messages, sampling=Sampling(temperature=0.0, max_tokens=2))
    at_first_token: Progress | None = None
    for _ev in stream:
        if at_first_token is None:
            at_first_token = stream.progress
    assert stream.result is not None and stream.result.completion_tokens >= 1
    assert at_first_token is not None, "no progress event came before the first token"
    assert at_first_token.op == "generate" and at_first_token.id == stream.id
    assert at_first_token.total == n_prompt - stream.result.cached_tokens
    assert 0 < at_first_token.done < at_first_token.total
    assert engine.progress() is None  # nothing in flight any more


def test_stop_while_the_prompt_is_read(small_batches: EngineClient) -> None:
    engine = small_batches
    engine.seq_rm(0, 0)
    messages = long_prompt(engine)
    n_prompt = engine.count_tokens(messages=messages)
    stream = engine.generate(messages=messages, sampling=Sampling(temperature=0.0, max_tokens=8))
    out: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: out.setdefault("result", stream.collect()))
    with EngineFreeze(engine, "generate") as held:  # held at its first report: the cancel lands mid-prompt
        reader.start()
        assert held.frozen.wait(120)
        seen = engine.progress()
        assert seen is not None and seen.id == stream.id
        stream.cancel()
    reader.join(120)
    result = out["result"]
    assert result.stop_reason == "cancelled" and result.completion_tokens == 0
    held = engine.seq_rm(0, 10**6)  # removes nothing: how many tokens the sequence holds
    assert held < n_prompt, "the whole prompt was read after Stop"


def test_prefill_reports_progress_and_stops_on_cancel(small_batches: EngineClient) -> None:
    engine = small_batches
    engine.seq_rm(0, 0)
    tokens = engine.tokenize(messages=long_prompt(engine))
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.setdefault("result", engine.prefill(tokens, 0)))
    with EngineFreeze(engine, "prefill") as held:   # held at its first report: the cancel lands mid-prompt
        worker.start()
        assert held.frozen.wait(120)
        seen = engine.progress()
        assert seen is not None and seen.op == "prefill" and seen.total == len(tokens)
        engine.cancel(seen.id)
    worker.join(120)
    assert out["result"]["complete"] is False
    assert out["result"]["held"] < len(tokens)
    assert engine.progress() is None


def test_a_model_load_reports_progress_and_a_cancel_stops_it(default_model_path: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from hisho.core.engine.ops import Load
    from hisho.core.errors import EngineError

    monkeypatch.setenv("HISHO_HOME", str(tmp_path))
    engine = EngineClient()
    try:
        engine.start()
        out: dict[str, Any] = {}

        def load() -> None:
            try:
                out["info"] = engine.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
            except EngineError as exc:
                out["error"] = exc

        worker = threading.Thread(target=load)
        worker.start()
        seen = wait_progress(engine, worker)
        worker.join(120)
        assert seen is not None and seen.op == "load" and seen.total == 1000 and 0 <= seen.done < 1000
        assert "info" in out, out
        # A cancel that reaches the engine before the load's next report stops it there (sent right behind the
        # request, it is read before the load begins: no race with how fast the file loads).
        req_id, events = engine._process.submit(Load(params=LoadParams(model_path=str(default_model_path))))
        engine.cancel(req_id)
        ev = events.get(timeout=120)
        while ev.get("ev") == "progress":
            ev = events.get(timeout=120)
        engine._process.forget(req_id)
        assert ev.get("ev") == "error" and "cancelled" in str(ev.get("message")), ev
    finally:
        engine.close()
