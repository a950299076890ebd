"""``hisho self-test``: every step passes on a fresh HISHO_HOME, and its report says what each step did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_self_test_passes_on_a_fresh_home(tmp_path: Path) -> None:
    env = dict(os.environ, HISHO_HOME=str(tmp_path / "fresh"))
    proc = subprocess.run([sys.executable, "-m", "hisho.cli.main", "self-test", "--json"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    steps = {s["step"]: s for s in report["steps"]}
    assert list(steps) == ["model", "engine", "load", "generate", "kv", "plan"]
    assert all(s["ok"] for s in steps.values())
    assert steps["generate"]["completion_tokens"] > 0
    assert steps["kv"]["restored_tokens"] > 0
    assert steps["plan"]["n_ctx"] >= 1024
    assert steps["plan"]["calibrated"] is True  # the probe subprocess answered
    assert steps["engine"]["cpu_variant"]  # "built-in" for a native build, the variant's name for a portable one
