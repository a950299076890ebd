"""No request outlives its engine: ``EngineClient.close`` ends every request in flight with ``EngineClosed`` at
once (a load of a real 1B true-shape file held mid-file, a streamed reply held mid-way), so a worker thread
waiting on the engine never blocks interpreter exit (``concurrent.futures`` joins its workers at exit)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import ErrorKind, LoadParams, Sampling
from hisho.core.engine.stream import Stream
from hisho.core.errors import EngineClosed, EngineCrashed, EngineError
from tests.faults import LoadFreeze


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test inspects what the worker got
            out["error"] = exc
        out["ended_at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _ended_closed(worker: threading.Thread, out: dict[str, Any], what: str) -> None:
    """The worker's wait on the engine ended, within a second of the close, with ``EngineClosed``."""
    worker.join(1.0)
    assert not worker.is_alive(), f"the {what} still waits on an engine that was closed"
    assert isinstance(out.get("error"), EngineClosed)
    assert out["error"].kind is ErrorKind.CLOSED


def _held_reply(client: EngineClient, model: Path, text: str, max_tokens: int, after: int) -> Stream:
    """A greedy reply on ``model`` that the engine holds after its ``after``-th token."""
    client.load(LoadParams(model_path=str(model), n_ctx=512))
    return client.generate(messages=[{"role": "user", "content": text}],
                           sampling=Sampling(max_tokens=max_tokens, temperature=0.0),
                           test_hooks={"hold_after_tokens": after})


def test_close_during_a_load_ends_the_load_with_a_clear_error() -> None:
    big = model_file("llama-3.2-1b", "Q4_0")
    client = EngineClient()
    try:
        client.start()
        with LoadFreeze(client) as held:
            worker, out = _in_thread(lambda: client.load(LoadParams(model_path=str(big), n_ctx=512)))
            assert held.frozen.wait(120), "the load never reported progress"
            closed_at = time.monotonic()
            client.close(timeout=0.5)    # the child is stopped mid-file: it cannot answer "shutdown"
        _ended_closed(worker, out, "load")
        assert out["ended_at"] - closed_at < 1.5
    finally:
        client.close()


def test_close_during_a_streamed_reply_ends_the_stream(default_model_path: Path) -> None:
    client = EngineClient(test_hooks=True)
    try:
        stream = _held_reply(client, default_model_path, "Count to a hundred.", 200, after=3)
        got: list[str] = []
        first = threading.Event()

        def read() -> None:
            for ev in stream:
                got.append(ev["text"])
                first.set()

        worker, out = _in_thread(read)
        assert first.wait(60), "no token arrived"
        client.close(timeout=0.5)
        _ended_closed(worker, out, "stream")
        assert 1 <= len(got) <= 3
    finally:
        client.close()


def test_a_killed_engine_still_reports_a_crash_not_a_close(default_model_path: Path) -> None:
    client = EngineClient(test_hooks=True)
    try:
        stream = _held_reply(client, default_model_path, "Hello", 50, after=1)
        it = iter(stream)
        next(it)
        client.kill()
        with pytest.raises(EngineCrashed):
            next(it)
        # the next request starts a fresh engine and re-loads the model
        assert client.count_tokens("hello") > 0
    finally:
        client.close()


def test_a_request_after_close_starts_a_new_engine(default_model_path: Path) -> None:
    client = EngineClient()
    try:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        client.close()
        assert not client.running
        assert client.count_tokens("hello") > 0  # re-loaded on demand, as after a crash
    finally:
        client.close()


def test_engine_error_kinds_round_trip() -> None:
    err = EngineClosed()
    assert isinstance(err, EngineError)
    assert err.kind is ErrorKind.CLOSED
