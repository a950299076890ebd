"""One Hisho per data folder: a second ``hisho chat`` (or window) on the same data is refused
with a clear line while the first runs, and touches nothing of the first's; after the first ends it works."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

from hisho.core import paths

CHAT = [sys.executable, "-m", "hisho.cli.main", "chat"]


def test_a_second_instance_is_refused_and_changes_nothing() -> None:
    first = subprocess.Popen(CHAT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdin is not None and first.stdout is not None
    try:
        first.stdin.write("Count from one to five.\n")
        first.stdin.flush()
        deadline = time.monotonic() + 120
        while "tok/s" not in first.stdout.readline() and time.monotonic() < deadline:
            pass
        second = subprocess.run(CHAT, input="A message from the second.\n", capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2
        assert "already running" in second.stderr and str(first.pid) in second.stderr
        gui = subprocess.run([sys.executable, "-m", "hisho.cli.main", "gui"], capture_output=True, text=True,
                             timeout=120)
        assert gui.returncode == 2 and "already running" in gui.stderr
        first.communicate("/quit\n", timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    with sqlite3.connect(paths.database_path()) as conn:
        rows = conn.execute("SELECT role, content, status FROM messages ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["user", "assistant"] and rows[1][2] == "done"
    again = subprocess.run(CHAT, input="/list\n", capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr  # the lock went with the first process
