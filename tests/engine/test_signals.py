"""Signals (issue 16, point 5): Ctrl+C in a terminal reaches the whole foreground process group. The engine runs
in its own session, so only the client gets it and cancels: ``hisho summarize`` exits 130, ``hisho chat`` saves
the reply as stopped. A client killed outright takes its engine with it at once."""

from __future__ import annotations

import os
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


def test_ctrl_c_to_the_process_group_cancels_summarize_with_130(tmp_path: Path) -> None:
    pdf = report_pdf(tmp_path / "report.pdf", pages=20)
    proc = subprocess.Popen([sys.executable, "-m", "hisho.cli", "summarize", str(pdf), *SMALL, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_for(engine_loaded, 120)
        time.sleep(1.5)  # into the map phase
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl+C: the whole foreground group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert '"cancelled": true' in out and "crash" not in err, (err, paths.engine_log_file().read_text()[-3000:])


def test_ctrl_c_during_a_chat_reply_saves_it_as_stopped(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hisho.cli", "chat"], stdin=subprocess.PIPE,
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
print(c.pid, flush=True)
prompt = "The harbour was quiet that night. " * 400
stream = c.generate(prompt=prompt, sampling=Sampling(max_tokens=50))
time.sleep(600)
"""


def test_an_engine_whose_client_is_killed_exits_at_once(default_model_path: Path) -> None:
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(default_model_path)], stdout=subprocess.PIPE,
                              text=True)
    assert client.stdout is not None
    engine = psutil.Process(int(client.stdout.readline()))
    time.sleep(0.5)  # the 2,800-token prompt is one prefill slice: seconds inside llama_decode
    client.kill()
    client.wait()
    killed_at = time.monotonic()
    # Exited = dead or a zombie: who reaps an orphan, and when, is up to PID 1 (in a container, not the engine).
    gone = wait_for(lambda: _exited(engine), 30)
    took = time.monotonic() - killed_at
    print(f"\nengine gone {took:.2f}s after its client was killed")
    assert gone and took < 2.0


def _exited(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
