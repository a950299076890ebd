"""``hisho serve`` takes each request's context from the model's own choice (the planner page's "Use this context",
settings ``model_choices``), as the window does; ``--ctx`` (``--n-ctx``) overrides it; another model's choice
changes nothing; ``hisho plan --profile serve`` plans what ``hisho serve`` loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hisho.core import paths, spawn
from hisho.core import settings as settings_mod
from tests.fixtures.gguf_shapes import TINY_LLAMA, write_shape

CLI = "from hisho.cli.main import main; raise SystemExit(main())"


def serve_line(*args: str) -> str:
    """The line ``hisho serve`` prints once it listens (the server is stopped at once)."""
    env = {**os.environ, "HISHO_HOME": os.environ["HISHO_HOME"]}
    proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--port", "0", "--parallel", "2", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server prints it once bound, or exits (then "")
    finally:
        spawn.stop_process(proc, 30)
    assert line.startswith("hisho serve: "), (line, proc.stderr.read() if proc.stderr else "")
    return line


def test_serve_uses_the_models_own_context_and_ctx_overrides_it(tmp_path: Path, default_model_path: Path) -> None:
    s = settings_mod.Settings(path=paths.settings_path())
    s.set("n_ctx", 4096)
    s.choose(default_model_path, n_ctx=2048, kv_type="f16")
    s.choose(write_shape(tmp_path / "other.gguf", TINY_LLAMA), n_ctx=1024, kv_type="q8_0")
    s.save()
    assert "2 parallel sequences of 2048 tokens" in serve_line()  # its own choice, not the settings' 4096
    assert "2 parallel sequences of 1536 tokens" in serve_line("--ctx", "1536")


def test_plan_for_serve_plans_what_serve_loads(default_model_path: Path) -> None:
    s = settings_mod.Settings(path=paths.settings_path())
    s.choose(default_model_path, n_ctx=2048, kv_type="f16")
    s.save()
    out = subprocess.run([sys.executable, "-c", CLI, "plan", "--profile", "serve", "--json", "--no-calibrate"],
                         capture_output=True, text=True, timeout=120, check=True)
    d = json.loads(out.stdout)
    from hisho.cli.serve import DEFAULT_PARALLEL

    # serve's default parallel sequences, each of the model's own 2048 tokens, in its own stream
    assert (d["profile"], d["n_ctx"]) == ("serve", 2048 * DEFAULT_PARALLEL)
    assert "warning" not in d  # 2048 per sequence is within the 8,192 it was trained on
