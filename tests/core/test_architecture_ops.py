"""The window's background work goes through its op layer (``hisho.gui.ops``): only that module hands work to
the executor's lanes, so no screen chooses a thread (docs/architecture.md, "The executor")."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app" / "hisho"
OP_LAYER = APP / "gui" / "ops.py"
LANES = frozenset({"engine", "store", "kv", "hub", "download", "remote"})   # hisho.core.executor.LANES
RECEIVERS = frozenset({"executor", "_executor", "workers", "ex", "lanes"})   # what the GUI calls its Executor


def _receiver(node: ast.expr) -> str:
    """The last name of what a method is called on: ``self.ctx.executor`` -> ``executor``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _submits(path: Path) -> list[int]:
    """Lines that hand work to a lane: ``<executor>.submit(...)``, or any ``.submit("<lane>", ...)``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "submit"):
            continue
        first = node.args[0] if node.args else None
        named_lane = isinstance(first, ast.Constant) and first.value in LANES
        if named_lane or _receiver(node.func.value) in RECEIVERS:
            lines.append(node.lineno)
    return lines


def test_only_the_op_layer_submits_work_in_the_gui() -> None:
    bad = []
    for path in sorted((APP / "gui").rglob("*.py")):
        if path != OP_LAYER:
            bad += [f"{path.relative_to(APP)}:{line}" for line in _submits(path)]
    assert not bad, f"GUI code choosing a lane itself (use hisho.gui.ops): {bad}"


def test_the_op_layer_is_where_the_gui_submits() -> None:
    assert _submits(OP_LAYER), "the scan no longer sees the op layer's own submit"


def test_the_submit_scan_sees_receivers_and_lane_names(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f(self, pool):\n"
                      "    self.ctx.executor.submit('store', g)\n"       # 2: by receiver
                      "    self.workers.submit(g, done=h)\n"             # 3: by receiver
                      "    pool.submit('hub', g)\n"                       # 4: by lane name
                      "    self.submit()\n"                               # a composer's own submit: not work
                      "    pool.submit(g)\n")                             # a thread pool of its own: not a lane
    assert _submits(sample) == [2, 3, 4]
