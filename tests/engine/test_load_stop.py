"""Stopping a model load from another thread (``Engine.cancel_load``, the window's Stop): llama.cpp's load
progress callback sees the cancel and gives up reading a real 1B true-shape file; nothing stays loaded and the
next request does not load that file again behind the user's back. The services root then loads the model that
answered before, or says that none is loaded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import ErrorKind, LoadParams
from hisho.core.errors import EngineError, LoadStopped
from tests.faults import LoadFreeze


def stop_when_loading(client: EngineClient) -> threading.Thread:
    """Stop the load from another thread while the engine is held mid-file (on a fast machine the file is read
    before a cancel sent at its first progress arrives)."""
    def watch() -> None:
        with LoadFreeze(client) as held:
            if held.frozen.wait(120):
                assert client.cancel_load()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_a_stopped_load_leaves_nothing_loaded_and_is_not_retried(default_model_path: Path) -> None:
    big = model_file("llama-3.2-1b", "Q4_0")
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        assert not client.cancel_load()                      # nothing loads now: nothing to stop
        watcher = stop_when_loading(client)
        with pytest.raises(LoadStopped, match="was stopped"):
            client.load(LoadParams(model_path=str(big), n_ctx=512))
        watcher.join(5)
        assert client.load_params is None
        with pytest.raises(EngineError) as err:              # not loaded, and not re-loading the big file
            client.count_tokens("hello")
        assert err.value.kind is ErrorKind.NOT_LOADED
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        assert client.count_tokens("hello") > 0
