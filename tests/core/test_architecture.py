"""The layering rules of docs/architecture.md, checked by walking every import in the source (the same rules as the
import-linter contracts in pyproject.toml, so the suite fails even where lint-imports is not run)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app" / "hisho"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
            found.add(node.module)
    return found


def _modules(under: Path) -> list[Path]:
    return sorted(under.rglob("*.py"))


def test_core_imports_neither_qt_nor_llama_cpp_nor_upper_layers() -> None:
    bad = []
    for path in _modules(APP / "core"):
        hits = _imports(path) & {"PySide6", "shiboken6", "llama_cpp", "hisho.gui", "hisho.engine"}
        hits |= {m for m in _imports(path) if m.startswith(("hisho.gui.", "hisho.engine."))}
        if hits:
            bad.append(f"{path.relative_to(APP)}: {sorted(hits)}")
    assert not bad, bad


def test_only_the_engine_imports_llama_cpp() -> None:
    bad = [str(p.relative_to(APP)) for p in _modules(APP) if "llama_cpp" in _imports(p)
           and (APP / "engine") not in p.parents]
    assert not bad, bad


def test_walker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import os\nfrom PySide6.QtCore import Qt\ndef f():\n    import llama_cpp\n")
    assert {"PySide6", "llama_cpp", "os"} <= _imports(sample)


@pytest.mark.skipif(not os.environ.get("HISHO_TEST_BLOCKED"), reason="only under make test-core (tests.blockers)")
def test_qt_and_llama_cpp_really_are_blocked_here() -> None:
    for name in ("PySide6", "llama_cpp"):
        with pytest.raises(ImportError):
            __import__(name)
    assert "PySide6" not in sys.modules and "llama_cpp" not in sys.modules


# ----- import cycles: every import that runs (module level and inside functions; not TYPE_CHECKING) -----------


DEV = APP.parent / "hisho_dev"  # the developer tools: not shipped, but held to the same rule


def _module_names(roots: tuple[Path, ...] = (APP, DEV)) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for root in roots:
        for path in _modules(root):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join(parts)] = path
    return names


def _runtime_edges(name: str, path: Path, names: dict[str, Path], *, typing: bool = False) -> set[str]:
    """The hisho modules ``name`` imports when it runs: ``from a.b import c`` counts as a.b.c when that is a
    module, else a.b; imports under ``if TYPE_CHECKING:`` never run and are left out (unless ``typing``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = set() if typing else {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and
                                        "TYPE_CHECKING" in ast.dump(node.test) for n in ast.walk(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(m for a in node.names if (m := known(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            out.update(m for a in node.names if (m := known(f"{base}.{a.name}")))
    out.discard(name)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_runtime_import_cycles() -> None:
    """In ``hisho`` and ``hisho_dev`` together (a tool importing the app is no cycle; two tools importing each
    other, or the app importing a tool, would be)."""
    names = _module_names()
    assert "hisho_dev.screenshots" in names and "hisho.core.services" in names
    graph = {name: _runtime_edges(name, path, names) for name, path in names.items()}
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_walker_counts_function_local_imports_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "hisho"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from hisho.b import g\n")
    (pkg / "b.py").write_text("from hisho import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hisho.a import f\n")
    names = {"hisho": pkg / "__init__.py", "hisho.a": pkg / "a.py", "hisho.b": pkg / "b.py", "hisho.c": pkg / "c.py"}
    graph = {n: _runtime_edges(n, p, names) for n, p in names.items()}
    assert graph["hisho.c"] == set()
    assert import_cycles(graph) == [["hisho.a", "hisho.b"]]


def test_no_module_over_500_lines() -> None:
    """Every package, the developer tools too: a module that grows past 500 lines is split along a seam."""
    long = [f"{p.relative_to(APP.parent)}: {n}" for p in _modules(APP) + _modules(DEV)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500]
    assert not long, long


# Who may construct the model registry and the download queue: the composition root, once per process (each
# ModelStore and Downloader opens its own database connection). A child process is its own root; benchmarks and
# the developer tools build what they measure or show. Everything else is given one (``Services.models``,
# ``Services.downloads``, ``services.open_models()`` for a command that needs only the registry).
REGISTRY_CLASSES = ("ModelStore", "Downloader")
REGISTRY_ROOTS = ("hisho/core/services.py", "hisho/core/hub/child.py", "hisho/bench/", "hisho_dev/")


def _constructions(path: Path, classes: tuple[str, ...]) -> list[int]:
    """Lines of ``path`` that call one of ``classes`` (by name or as ``module.Name``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in classes:
                lines.append(node.lineno)
    return lines


def test_the_model_registry_and_downloads_are_built_only_by_the_root() -> None:
    bad = []
    for path in _modules(APP) + _modules(DEV):
        where = path.relative_to(APP.parent).as_posix()
        if where.startswith(REGISTRY_ROOTS):
            continue
        bad += [f"{where}:{line}" for line in _constructions(path, REGISTRY_CLASSES)]
    assert not bad, f"ModelStore/Downloader built outside the composition root: {bad}"


def test_the_construction_scan_sees_calls_by_name_and_attribute(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("from x import ModelStore\nimport y\n\ndef f():\n    a = ModelStore()\n    return y.Downloader(a)\n"
                      "\nclass ModelStoreUser:\n    store: ModelStore\n")
    assert _constructions(sample, REGISTRY_CLASSES) == [5, 6]


# The frame hosts screens; a screen (gui/chat, gui/models, gui/settings) imports of gui/shell only its public
# surface: the Protocols naming what it uses of the window, the pages' opener protocol, the app's state on the GUI
# thread, the theme, the text prompt and the small shared widgets. Type-only imports count too: a screen that
# names the controller or the main window depends on the frame's insides all the same.
SCREENS = ("chat", "models", "settings")
SHELL_PUBLIC = frozenset({"protocols", "pages", "state_bridge", "theme", "text_dialog", "widgets"})


# ----- package loops: inside core, the engine and the window, no two packages import each other -----------------
# (docs/architecture.md "Floors"; the floors' order is import-linter's layers contracts. Type-only imports count,
# as they do there. gui/shell is two floors: the frame on top, its public surface below.)

FLOORED = ("hisho.core", "hisho.engine", "hisho.gui")


def _package_of(module: str) -> str | None:
    """The package (or top-level module) of core, the engine or the window that ``module`` stands in."""
    for parent in FLOORED:
        if module.startswith(parent + "."):
            head = module[len(parent) + 1:].split(".")
            if parent == "hisho.gui" and head[0] == "shell":
                surface = len(head) > 1 and head[1] in SHELL_PUBLIC
                return "hisho.gui.shell (public surface)" if surface else "hisho.gui.shell (frame)"
            return f"{parent}.{head[0]}"
    return None


def package_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of packages that import each other, from a module import graph."""
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if (source := _package_of(module)) is None:
            continue
        targets = {t for m in imported if (t := _package_of(m)) is not None and t != source}
        packages.setdefault(source, set()).update(targets)
    return import_cycles(packages)


def test_no_package_loops_inside_core_the_engine_and_the_window() -> None:
    names = _module_names((APP,))
    graph = {name: _runtime_edges(name, path, names, typing=True) for name, path in names.items()}
    loops = package_loops(graph)
    assert not loops, "\n".join(" <-> ".join(c) for c in loops)


def test_the_package_walker_sees_a_type_only_loop_and_the_shell_s_two_floors(tmp_path: Path) -> None:
    pkg = tmp_path / "hisho" / "core"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b.py").write_text("from hisho.core.a import x\n")
    (pkg / "a" / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hisho.core import b\n")
    names = {"hisho.core.a.x": pkg / "a" / "x.py", "hisho.core.b": pkg / "b.py"}
    graph = {n: _runtime_edges(n, p, names, typing=True) for n, p in names.items()}
    assert package_loops(graph) == [["hisho.core.a", "hisho.core.b"]]
    shell = {"hisho.gui.chat.v": {"hisho.gui.shell.theme"}, "hisho.gui.shell.main_window": {"hisho.gui.chat.v"}}
    assert package_loops(shell) == []
    shell["hisho.gui.shell.theme"] = {"hisho.gui.shell.context"}
    assert package_loops(shell) == [["hisho.gui.chat", "hisho.gui.shell (frame)", "hisho.gui.shell (public surface)"]]


def _shell_modules_named(path: Path) -> set[str]:
    """The gui/shell modules ``path`` imports (anywhere in it, TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "hisho.gui.shell":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hisho.gui.shell."):
            found.add(node.module.split(".")[3])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[3] for a in node.names if a.name.startswith("hisho.gui.shell."))
    return found


def test_screens_import_only_the_frame_s_public_surface() -> None:
    bad = []
    for screen in SCREENS:
        for path in _modules(APP / "gui" / screen):
            inner = _shell_modules_named(path) - SHELL_PUBLIC
            if inner:
                bad.append(f"{path.relative_to(APP)}: gui/shell/{sorted(inner)}")
    assert not bad, bad


def test_the_screen_scan_sees_type_only_and_package_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("from typing import TYPE_CHECKING\nfrom hisho.gui.shell import theme, toast\n"
                      "if TYPE_CHECKING:\n    from hisho.gui.shell.controller import ChatController\n"
                      "def f():\n    import hisho.gui.shell.main_window\n")
    assert _shell_modules_named(sample) == {"theme", "toast", "controller", "main_window"}
