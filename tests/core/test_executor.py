"""The executor's lanes: order, callbacks, failure path, latest-wins keys, delays without a waiting thread."""

from __future__ import annotations

import threading

import pytest

from hisho.core.executor import Executor


@pytest.fixture
def ex() -> Executor:
    executor = Executor()
    yield executor
    executor.shutdown(5)


def test_jobs_run_in_order_on_one_thread_per_lane(ex: Executor) -> None:
    seen: list[tuple[int, str]] = []
    for i in range(5):
        ex.submit("store", lambda i=i: seen.append((i, threading.current_thread().name)))
    assert ex.idle("store", 5)
    assert [i for i, _ in seen] == list(range(5))
    assert len({name for _, name in seen}) == 1 and seen[0][1].startswith("hisho-store")


def test_done_and_failed_callbacks(ex: Executor) -> None:
    got: list[object] = []
    ex.submit("engine", lambda: 41 + 1, done=got.append)
    ex.submit("engine", lambda: 1 / 0, done=got.append, failed=lambda exc: got.append(type(exc)))
    assert ex.idle("engine", 5)
    assert got == [42, ZeroDivisionError]


def test_failure_without_handler_goes_to_on_error(ex: Executor) -> None:
    errors: list[BaseException] = []
    ex.on_error = errors.append
    ex.submit("store", lambda: [][1])
    assert ex.idle("store", 5)
    assert isinstance(errors[0], IndexError)


def test_post_carries_callbacks(ex: Executor) -> None:
    posted: list[object] = []
    ex.post = lambda fn: (posted.append(fn), fn())
    got: list[int] = []
    ex.submit("kv", lambda: 7, done=got.append)
    assert ex.idle("kv", 5)
    assert got == [7] and len(posted) == 1


def test_latest_key_replaces_a_waiting_job(ex: Executor) -> None:
    gate = threading.Event()
    ran: list[str] = []
    ex.submit("engine", gate.wait)  # hold the lane
    first = ex.submit("engine", lambda: ran.append("first"), key="draft")
    ex.submit("engine", lambda: ran.append("second"), key="draft")
    gate.set()
    assert ex.idle("engine", 5)
    assert ran == ["second"] and first.cancelled()


def test_delayed_job_is_cancelled_by_a_newer_one(ex: Executor) -> None:
    ran: list[str] = []
    ex.submit("engine", lambda: ran.append("late"), key="pause", delay=0.2)
    ex.submit("engine", lambda: ran.append("now"), key="pause")
    assert ex.idle("engine", 5)
    assert ran == ["now"]
    ex.submit("engine", lambda: ran.append("held"), key="pause", delay=0.05)
    assert ex.busy("engine")  # a held-back job counts: idle() waits for it
    assert ex.idle("engine", 5)
    assert ran == ["now", "held"]


def test_call_waits_for_the_result_and_runs_inline_on_its_own_lane(ex: Executor) -> None:
    def nested() -> str:
        return ex.call("engine", lambda: threading.current_thread().name)  # already on the lane: no deadlock

    assert ex.call("engine", nested).startswith("hisho-engine")
    assert ex.call("store", lambda: 5) == 5


def test_closed_executor_starts_nothing(ex: Executor) -> None:
    ex.shutdown(5)
    future = ex.submit("store", lambda: 1)
    assert future.cancelled() and not ex.busy("store")
