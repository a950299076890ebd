"""Where "may I send?" is decided: the app's state (``Now``, written by the composition root), never a flag a
window keeps or an engine handle it looks into. The rule of docs/architecture.md ("Readiness comes from
``Now``"), checked by reading the source of every module under ``hisho/gui``."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app" / "hisho"

FLAGS = {"model_ready", "model_failed", "connecting"}          # the window's old readiness flags
WRITES = {"chosen", "loading", "answering", "unloaded", "failed", "connecting", "measured", "working",
          "api_queue"}                                           # AppState's writes: the root's alone


def _problems(path: Path) -> list[str]:
    """Each place in ``path`` that keeps its own readiness (assigns a flag), asks an engine handle whether a
    model is loaded (``... load_params is None``), or writes the app's state (``<x>.state.loading(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr in FLAGS:
                    out.append(f"{path.name}:{node.lineno}: assigns {t.attr}")
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
                and node.left.attr == "load_params" and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                and any(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)):
            out.append(f"{path.name}:{node.lineno}: asks load_params whether a model is loaded")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "state"):
            out.append(f"{path.name}:{node.lineno}: writes the app's state ({node.func.attr})")
    return out


def test_the_window_reads_readiness_from_the_app_state_only() -> None:
    bad = [p for path in sorted((APP / "gui").rglob("*.py")) for p in _problems(path)]
    assert not bad, bad


def test_the_readiness_scan_sees_flags_engine_handles_and_state_writes(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f(c, ctx):\n"
                      "    c.model_ready = False\n"
                      "    c.model_ready, c.model_failed = True, False\n"
                      "    c.sending.connecting = 'x'\n"
                      "    if ctx.engine.load_params is None:\n"
                      "        ctx.state.loading()\n"
                      "    if ctx.load_params is not None:\n"
                      "        pass\n"
                      "    ready = ctx.state.now.ready\n"
                      "    ctx.asked_to_switch()\n")
    found = sorted(_problems(sample), key=lambda p: int(p.split(":")[1]))
    assert found == ["m.py:2: assigns model_ready", "m.py:3: assigns model_ready", "m.py:3: assigns model_failed",
                     "m.py:4: assigns connecting", "m.py:5: asks load_params whether a model is loaded",
                     "m.py:6: writes the app's state (loading)",
                     "m.py:7: asks load_params whether a model is loaded"], found


def test_the_core_readers_of_readiness_are_the_root_and_the_state() -> None:
    """Outside the root and the state, core code does not write the state either (the after-turn hook that
    records the measured speeds is the root's, in ``core/wiring.py``)."""
    allowed = {APP / "core" / "services.py", APP / "core" / "appstate.py", APP / "core" / "wiring.py"}
    bad = [p for path in sorted((APP / "core").rglob("*.py")) if path not in allowed
           for p in _problems(path) if "writes the app's state" in p]
    assert not bad, bad
