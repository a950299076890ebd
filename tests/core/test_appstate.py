"""The app's one state (``hisho.core.appstate``): the root writes it, every reader sees the same moment, and a
change of model or engine clears the speeds measured on the one before."""

from __future__ import annotations

import threading

from hisho.core.appstate import AppState, Now
from hisho.core.models.names import ModelName, remote_name

OWL = ModelName("pocket-owl", "pocket-owl", "Pocket-Owl-135M.Q4_1")
SMOL = ModelName("smollm2", "smollm2", "SmolLM2")


def test_watchers_see_each_change_and_a_switch_clears_the_speeds() -> None:
    state = AppState()
    seen: list[Now] = []
    unsubscribe = state.subscribe(seen.append)
    state.chosen(SMOL, "/m/smol.gguf")
    assert not state.now.loaded and state.now.model == SMOL
    state.answering(SMOL, path="/m/smol.gguf", n_ctx=4096, kv_type="q8_0")
    state.measured(118.4, 0.42)
    assert (state.now.tokens_per_s, state.now.ttft_s) == (118.4, 0.42)
    state.loading(OWL, "/m/owl.gguf")
    assert state.now.loading and not state.now.loaded
    assert state.now.model == OWL and state.now.tokens_per_s is None and state.now.ttft_s is None
    state.answering(OWL, path="/m/owl.gguf", n_ctx=2048, kv_type="f16")
    assert state.now.key == "/m/owl.gguf" and state.now.n_ctx == 2048 and state.now.tokens_per_s is None
    assert [n.model.id for n in seen] == ["smollm2", "smollm2", "smollm2", "pocket-owl", "pocket-owl"]
    unsubscribe()
    state.measured(50.0, 0.1)
    assert len(seen) == 5 and state.now.tokens_per_s == 50.0


def test_a_remote_engine_is_named_by_its_server_and_keyed_apart() -> None:
    state = AppState()
    state.answering(remote_name("qwen3-8b", "big-box"), engine="big-box", n_ctx=32768)
    now = state.now
    assert now.remote and now.path == "" and now.key == "remote:big-box:qwen3-8b"
    assert now.model.id == "qwen3-8b" and now.model.display == "qwen3-8b · big-box"
    state.unloaded()
    assert not state.now.loaded and state.now.model.id == "qwen3-8b"


def test_a_failing_watcher_never_fails_the_writer_and_others_still_hear() -> None:
    state = AppState()
    heard: list[str] = []

    def broken(_now: Now) -> None:
        raise RuntimeError("a screen's bug")

    state.subscribe(broken)
    state.subscribe(lambda now: heard.append(now.model.id))
    state.answering(OWL, path="/m/owl.gguf")
    assert heard == ["pocket-owl"]


def test_readers_on_other_threads_see_whole_moments() -> None:
    state = AppState()
    stop = threading.Event()
    torn: list[Now] = []

    def read() -> None:
        while not stop.is_set():
            now = state.now
            if now.loaded and (now.model == OWL) != (now.path == "/m/owl.gguf"):
                torn.append(now)

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(2000):
        state.answering(OWL, path="/m/owl.gguf")
        state.answering(SMOL, path="/m/smol.gguf")
    stop.set()
    reader.join(10)
    assert not reader.is_alive() and not torn


def test_readiness_follows_a_failed_load_and_a_connect_that_ends_either_way() -> None:
    state = AppState()
    state.failed("the memory plan says this model will not fit", SMOL, "/m/smol.gguf")
    now = state.now
    assert not now.ready and not now.loaded and now.failed.startswith("the memory plan")
    assert now.model == SMOL and now.path == "/m/smol.gguf"
    state.answering(SMOL, path="/m/smol.gguf")
    assert state.now.ready and state.now.failed == ""            # a model answers: the failure is past
    state.connecting("big-box")
    assert state.now.loaded and not state.now.ready and state.now.connecting == "big-box"
    state.connecting("")                                          # that connect failed: what answered still does
    assert state.now.ready and state.now.model == SMOL
    state.connecting("big-box")
    state.answering(remote_name("qwen3-8b", "big-box"), engine="big-box")
    assert state.now.ready and state.now.connecting == "" and state.now.remote
    state.loading(OWL, "/m/owl.gguf")
    assert not state.now.ready and state.now.failed == ""
