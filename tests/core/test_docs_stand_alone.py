"""The product's docs/ stand alone for a stranger: no page leans on a design file outside the repository, names
a developer's machine path, or says which machine its figures came from anywhere but its one "Measured on"
table. Code comments and docstrings name the docs page, never that outside file either."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
OUTSIDE = re.compile(r"DESIGN\.md|/work/|/root/|(?<![\w.])notes/")
# "on the 2-core box", "this dev box": where a figure came from is said once, in the page's table.
BOX = re.compile(r"\b(?:this|the|a|loaded|shared|dev) (?:\S+ )?box\b(?! and)")
MESSAGE_BOX = ("message box", "out of the box", "back to the box", "the Chat settings box", "self-signed box",
               "GPU box")


def test_docs_name_nothing_outside_the_repository() -> None:
    assert DOCS
    bad = [f"{p.name}:{n}: {line.strip()}" for p in DOCS
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not bad, bad


def test_code_comments_name_the_docs_not_an_outside_design_file() -> None:
    bad = [str(p.relative_to(ROOT)) for top in ("app", "tests") for p in sorted((ROOT / top).rglob("*.py"))
           if "DESIGN" + ".md" in p.read_text(encoding="utf-8")]
    assert not bad, bad


def test_a_page_with_figures_names_its_machine_in_one_table() -> None:
    for p in DOCS:
        text = p.read_text(encoding="utf-8")
        assert text.count("## Measured on") <= 1, p.name
        if "the test VM" in text:
            assert "## Measured on" in text, f"{p.name} says 'the test VM' but has no Measured on table"
        stray = [line.strip() for line in text.splitlines()
                 if BOX.search(line) and not any(ok in line for ok in MESSAGE_BOX)]
        assert not stray, (p.name, stray)
