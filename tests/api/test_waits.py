"""What an API request waits behind (``hisho.api.waits``): the order the engine runs requests in, read from the
requests in flight an engine reports. The engine's side is in tests/api/test_busy_engine.py; these pin the rules
on a table of requests in flight."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hisho.api import waits
from hisho.core.engine.protocol import Progress


@dataclass
class Reported:
    """An engine as far as the queue reads one: its requests in flight and the progress it reports."""

    requests: list[tuple[int, str, float]] = field(default_factory=list)
    reading: Progress | None = None

    def activity(self) -> list[tuple[int, str, float]]:
        return self.requests

    def progress(self) -> Progress | None:
        return self.reading


def test_a_request_waits_only_behind_work_sent_before_it() -> None:
    now = time.monotonic()
    engine = Reported([(3, "state_save", now), (4, "tokenize", now), (5, "batch_generate", now), (7, "serve", now)])
    assert waits.behind(engine, 7) == ("batch_generate", now)      # the summary sent before it
    assert waits.behind(engine, 5) is None                         # a KV save in the background and a token count
    assert waits.behind(engine, None) == ("batch_generate", now)   # not sent yet: behind everything in flight
    assert waits.running(engine) == "tokenize"                     # in order; the save's files are written aside
    assert waits.running(Reported(engine.requests[:1] + engine.requests[2:])) == "summary"
    assert waits.running(Reported([(1, "state_save", now)])) == "saving kv"
    assert waits.running(Reported()) == "idle" and waits.behind(Reported(), None) is None
    assert waits.behind(object(), None) is None                    # an engine that does not say (a remote one)


def test_retry_after_is_what_is_left_of_the_work_ahead_when_the_engine_says_how_far_it_is() -> None:
    sent = time.monotonic() - 10.0
    engine = Reported([(1, "load", sent)], Progress(1, "load", 250, 1000))  # a quarter read in 10 s
    assert 29 <= waits.retry_after(engine, ("load", sent), 5.0) <= 31
    assert waits.retry_after(Reported([(1, "load", sent)]), ("load", sent), 5.0) == 5   # no progress: the bound
    assert waits.retry_after(engine, ("load", time.monotonic() - 1000), 5.0) == 60      # at most a minute


def test_the_queue_reports_how_many_wait_and_for_how_long() -> None:
    queue = waits.WaitQueue(30.0)
    assert queue.snapshot() == {"waiting": 0, "oldest_wait_s": 0.0, "max_wait_s": 30.0, "refused": 0}
    first = queue.enter()
    time.sleep(0.05)
    second = queue.enter()
    shown = queue.snapshot()
    assert shown["waiting"] == 2 and shown["oldest_wait_s"] >= 0.0 and queue.waited(first) >= 0.05
    queue.leave(first)
    queue.leave(first)  # leaving twice is harmless (refused, then the request's own end)
    assert queue.snapshot()["waiting"] == 1 and queue.waited(first) == 0.0
    queue.leave(second)
    assert queue.snapshot()["waiting"] == 0
