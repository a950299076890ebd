"""The bundle's lists (packaging/collect.py) against what the app really imports.

A Qt module in EXCLUDES that the app imports makes the installed window fail to open while every in-tree test
passes (it happened: QtNetwork, for the single-instance socket). This runs in `make test`, minutes before the
package test would find it.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _collect() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hisho_collect", ROOT / "packaging" / "collect.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _imports_by_file() -> dict[str, set[str]]:
    """What each module of the shipped package (app/hisho; not the checkout's hisho_dev) imports."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / "app" / "hisho").rglob("*.py"):
        names = out.setdefault(path.relative_to(ROOT / "app").as_posix(), set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    return out


def _imported_modules() -> set[str]:
    return set().union(*_imports_by_file().values())


def _under(name: str, roots: set[str]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def test_no_imported_module_is_excluded() -> None:
    collect = _collect()
    excludes = set(collect.EXCLUDES) - set(collect.DEV_ONLY)
    imported = _imported_modules()
    assert "PySide6.QtWidgets" in imported  # the scan sees the app
    clash = {name for name in imported for ex in excludes if name == ex or name.startswith(ex + ".")}
    assert not clash, f"packaging/collect.py excludes modules the app imports: {sorted(clash)}"


def test_only_the_hub_and_tools_benches_reach_for_the_developer_tools() -> None:
    dev = set(_collect().DEV_ONLY)
    users = {f for f, names in _imports_by_file().items() if any(_under(n, dev) for n in names)}
    # Each says "needs a source checkout" when they are missing.
    assert users == {"hisho/bench/hub.py", "hisho/bench/tools.py"}
    for user in users:
        assert "except ImportError" in (ROOT / "app" / user).read_text(encoding="utf-8")


def test_every_imported_qt_module_is_bundled() -> None:
    collect = _collect()
    qt = {name for name in _imported_modules() if name.startswith("PySide6.Qt")}
    # PyInstaller follows the app's own imports, but only from modules it sees; naming each Qt module the app
    # imports in HIDDEN_IMPORTS keeps a lazily imported one (the single-instance socket) in the bundle.
    missing = {name for name in qt if name not in {"PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets"}}
    assert missing <= set(collect.HIDDEN_IMPORTS), sorted(missing - set(collect.HIDDEN_IMPORTS))
