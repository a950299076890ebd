"""The test run ends by itself or fails loudly: a run whose tests all pass but whose process lingers after the
last one (a thread that waits forever) dumps every thread's stack and exits non-zero (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LINGERING = '''
import threading

def test_passes():
    threading.Thread(target=threading.Event().wait, name="waits-forever").start()  # not a daemon
'''


def test_a_run_that_lingers_after_its_last_test_fails_with_every_stack(tmp_path: Path) -> None:
    (tmp_path / "test_lingers.py").write_text(LINGERING)
    env = {**os.environ, "HISHO_TEST_EXIT_GUARD_S": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:pytest-qt",
         "-p", "tests.conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_lingers.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert "1 passed" in done.stdout
    assert done.returncode != 0
    assert "Timeout" in done.stderr and "waits-forever" not in done.stdout
    assert "threading.py" in done.stderr  # the lingering thread's stack was dumped
