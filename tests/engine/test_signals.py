"""Signals: Ctrl+C in a terminal reaches the whole foreground process group. The engine runs
in its own session, so only the client gets it and cancels: ``hisho summarize`` exits 130, ``hisho chat`` saves
the reply as stopped. A client killed outright takes its engine with it at once, even one that cannot run a line."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil

from hisho.core import paths
from tests.engine.test_summarize import SMALL, report_pdf


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def engine_loaded() -> bool:
    try:
        return "loaded " in paths.engine_log_file().read_text(errors="replace")
    except OSError:
        return False


# The engine logs this as it begins a batch in a job context; the speed probe before the plan is one sequence,
# the map phase the first of several.
MAP_BEGUN = re.compile(r"engine\[(\d+)\] .*job context: ([2-9]|\d{2,}) sequences")


def map_begun() -> int | None:
    """The engine's pid once it has begun the map phase's batch, else None."""
    try:
        found = MAP_BEGUN.search(paths.engine_log_file().read_text(errors="replace"))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def test_ctrl_c_to_the_process_group_cancels_summarize_with_130(tmp_path: Path) -> None:
    pdf = report_pdf(tmp_path / "report.pdf", pages=20)
    proc = subprocess.Popen([sys.executable, "-m", "hisho.cli.main", "summarize", str(pdf), *SMALL, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    frozen: list[int] = []
    try:
        # The engine is stopped (SIGSTOP) the moment it begins the map phase, so the Ctrl+C lands while the
        # summary is surely under way (a fast machine finished it within a fixed sleep); it goes on after it.
        found: list[int] = []
        assert wait_for(lambda: (pid := map_begun()) is not None and not found.append(pid), 120)
        os.kill(found[0], signal.SIGSTOP)
        frozen.append(found[0])
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl+C: the whole foreground group
        os.kill(frozen.pop(), signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert '"cancelled": true' in out and "crash" not in err, (err, paths.engine_log_file().read_text()[-3000:])


def test_ctrl_c_during_a_chat_reply_saves_it_as_stopped(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hisho.cli.main", "chat"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("Tell me a very long story about the sea, the ships and every sailor on them.\n")
        proc.stdin.flush()
        assert wait_for(engine_loaded, 120)
        db = paths.database_path()

        def streaming() -> bool:
            with sqlite3.connect(db) as conn:
                row = conn.execute("SELECT length(content) FROM messages WHERE role = 'assistant'").fetchone()
            return bool(row and row[0])

        assert wait_for(streaming, 120)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(1.0)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    with sqlite3.connect(db) as conn:
        status, error = conn.execute("SELECT status, error FROM messages WHERE role = 'assistant'").fetchone()
    assert status == "stopped" and not error and "[stopped]" in out


CLIENT = """
import sys, time
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
c = EngineClient()
c.load(LoadParams(model_path=sys.argv[1], n_ctx=4096, n_batch=4096, n_ubatch=4096))
stream = c.generate(prompt="The harbour was quiet that night. " * 400, sampling=Sampling(max_tokens=50))
print(c.pid, flush=True)
time.sleep(600)
"""


def test_an_engine_whose_client_is_killed_exits_at_once(default_model_path: Path) -> None:
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(default_model_path)], stdout=subprocess.PIPE,
                              text=True)
    assert client.stdout is not None
    engine = psutil.Process(int(client.stdout.readline()))
    # Stopped (SIGSTOP), the engine stands for one stuck in a long native call (a prefill slice runs for seconds):
    # it reads no stdin and runs no watchdog, so only the kernel's parent-death signal can end it.
    engine.suspend()
    try:
        client.kill()
        client.wait()
        # Exited = dead or a zombie: who reaps an orphan, and when, is up to PID 1 (in a container, not the
        # engine). The bound only catches a hang: a stopped engine nobody kills stays forever.
        assert wait_for(lambda: _exited(engine), 60), "the engine outlived its client"
    finally:
        if not _exited(engine):
            engine.kill()


def _exited(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
