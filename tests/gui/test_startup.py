"""Start-up: a failure before the window is up is logged and told in one line, never a silent exit; the first
paint is reported for the start-up benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.gui.shell.app import _report_first_paint, open_window


def test_startup_failure_is_logged_and_told_in_one_line(hisho_home: Path) -> None:
    (hisho_home / "config").write_text("a file where the settings folder should be")
    env = dict(os.environ, HISHO_HOME=str(hisho_home), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-c", "import sys; from hisho.cli.main import main; sys.exit(main(['gui']))"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "propagateSizeHints" not in ln]
    assert len(lines) == 1, proc.stderr
    assert "the window could not start" in lines[0] and "config" in lines[0]
    assert "Traceback" not in proc.stderr
    log = (hisho_home / "logs" / "hisho.log").read_text(encoding="utf-8")
    assert "the window could not start" in log and "Traceback" in log and "FileExistsError" in log


def test_first_paint_is_written_when_asked(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           default_model_path: Path) -> None:
    target = tmp_path / "first-paint"
    monkeypatch.setenv("HISHO_FIRST_PAINT_FILE", str(target))
    window = open_window(None)
    qtbot.addWidget(window)
    before = time.time()
    _report_first_paint(window)
    window.show()
    try:
        qtbot.waitUntil(target.exists, timeout=30_000)
        qtbot.waitUntil(lambda: window.controller.model_ready, timeout=30_000)
    finally:
        window.close()
    painted = float(target.read_text().strip())
    assert before <= painted <= time.time()
