"""The engine's queue in the app's one state (``Now.queue``): the root's own work (a load) and the work it hands
callbacks for (a summary through ``Documents.working``, the API's requests through ``WaitQueue``) come and go
there; a change of model keeps it; the status bar's short line reads it."""

from __future__ import annotations

import pytest

from hisho.api.waits import WaitQueue
from hisho.core.appstate import AppState, Now, Queue
from hisho.core.models.names import ModelName

SMOL = ModelName("smollm2", "smollm2", "SmolLM2")


def test_work_is_in_the_queue_while_it_runs_and_leaves_even_when_it_fails() -> None:
    state = AppState()
    seen: list[Queue] = []
    state.subscribe(lambda now: seen.append(now.queue))
    with state.working("summarizing report.pdf"):
        assert state.now.queue.jobs == ("summarizing report.pdf",)
        with pytest.raises(RuntimeError), state.working("loading SmolLM2"):
            assert state.now.queue.label == "summarizing report.pdf · 1 more waiting"
            raise RuntimeError("the load failed")
        assert state.now.queue.jobs == ("summarizing report.pdf",)
    assert state.now.queue.idle and state.now.queue.label == ""
    assert [q.jobs for q in seen] == [("summarizing report.pdf",), ("summarizing report.pdf", "loading SmolLM2"),
                                      ("summarizing report.pdf",), ()]


def test_a_model_change_keeps_the_queue_and_the_queue_keeps_the_model() -> None:
    state = AppState()
    with state.working("summarizing report.pdf"):
        state.loading(SMOL, "/m/smol.gguf")
        state.answering(SMOL, path="/m/smol.gguf", n_ctx=4096)
        state.measured(120.0, 0.3)
        assert state.now.queue.jobs == ("summarizing report.pdf",)
        state.api_queue(1, 2)
        now = state.now
    assert now.loaded and now.model == SMOL and now.tokens_per_s == 120.0   # the queue's writes left it alone
    assert now.queue == Queue(("summarizing report.pdf",), api_running=1, api_waiting=2)


def test_the_api_s_requests_are_counted_and_an_unchanged_count_tells_nobody() -> None:
    state = AppState()
    seen: list[Now] = []
    state.subscribe(seen.append)
    state.api_queue(1, 0)
    assert state.now.queue.label == "API: 1 request running"
    state.api_queue(1, 0)
    assert len(seen) == 1
    state.api_queue(2, 3)
    assert state.now.queue.label == "API: 2 requests running, 3 waiting"
    state.api_queue(0, 2)
    assert state.now.queue.label == "API: 2 requests waiting"
    state.api_queue(0, 0)
    assert state.now.queue.idle and len(seen) == 4


def test_the_api_s_wait_queue_tells_each_new_count_once() -> None:
    counts: list[int] = []
    waits = WaitQueue(30.0, on_change=counts.append)
    a, b = waits.enter(), waits.enter()
    waits.leave(a)
    waits.leave(a)   # the request's ``finally`` leaves again: nothing changes, nobody is told
    waits.leave(b)
    assert counts == [1, 2, 1, 0] and waits.waiting == 0


def test_the_label_says_the_app_s_work_then_the_api_s_as_health_counts_it() -> None:
    assert Queue(("loading Qwen3-4B",), api_waiting=1).label == "loading Qwen3-4B · API: 1 request waiting"
    assert Queue(api_running=3, api_waiting=1).label == "API: 3 requests running, 1 waiting"
    assert Queue(api_waiting=2).label == "API: 2 requests waiting"  # still being sent (behind a load)
    assert Queue().label == ""
