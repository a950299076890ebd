"""``spawn.stop_process``: the one way a child (the engine, a benchmark's server, a test's ``hisho serve``) is
stopped — asked, waited for, then killed and always reaped."""

from __future__ import annotations

import subprocess
import sys
import time

from hisho.core import spawn

# Prints "ready" once its SIGTERM handler is in place, so the test never signals it before.
IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(600)")


def _child(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_child_that_exits_when_asked_is_not_killed() -> None:
    proc = _child("import time; print('ready', flush=True); time.sleep(600)")
    assert spawn.stop_process(proc, 60) is True
    assert proc.returncode == -15  # SIGTERM, not SIGKILL


def test_a_child_that_ignores_the_request_is_killed_after_the_timeout() -> None:
    proc = _child(IGNORES_TERM)
    start = time.monotonic()
    assert spawn.stop_process(proc, 0.5) is False
    assert proc.returncode == -9
    assert time.monotonic() - start >= 0.5  # it was given the time


def test_a_custom_request_and_an_already_gone_child() -> None:
    proc = _child(IGNORES_TERM)
    asked: list[bool] = []

    def ask() -> None:
        asked.append(True)
        raise OSError("pipe closed")  # counts as asked

    assert spawn.stop_process(proc, 0.2, ask=ask) is False
    assert asked == [True] and proc.returncode == -9
    assert spawn.stop_process(proc, 0.2, ask=ask) is True  # already reaped: nothing asked again
    assert asked == [True]
