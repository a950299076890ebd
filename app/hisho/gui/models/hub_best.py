"""The Hub tab's first list, before any search: the models best for this computer.

The well-known instruct models of ``core.hub.suggest`` (no request: the estimate comes from their published
sizes), the one the first-run card would offer first: the best that fits and, where this machine's speed is
measured (``planner.speed``), answers at 8 tok/s or faster; then the others that fit and are fast enough here,
then those that fit but would answer slower (said on their line), then the ones that do not fit
(``suggest.ranked``). Each line says its fit and speed; one already installed says so. Picking one opens its repository, whose files the planner then judges from their headers.

Rules of use: ``show_best(tab)`` on the GUI thread; the estimate runs on the ``hub`` lane and is dropped when a
search or a repository was asked for meanwhile (the tab's sequence number).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidgetItem

from hisho.gui import ops

if TYPE_CHECKING:
    from hisho.gui.models.hub_tab import HubTab



@dataclass(frozen=True)
class Line:
    repo: str
    text: str
    tip: str


def best_lines(tab: HubTab) -> tuple[list[Line], str]:
    """The candidates, best for this computer first, and a one-line heading (runs on the hub lane)."""
    from hisho.core.hub.fit import LABELS
    from hisho.core.hub.suggest import estimate, is_slow, ranked, speed_of, suggest, why_not_larger
    from hisho.core.planner import speed

    budget, _opts = tab.budget()
    profile = speed.load_profile()
    installed = frozenset(Path(e.path).name for e in tab.models.list())
    pick = suggest(budget, profile, installed)
    order = ranked(budget, profile, installed)
    lines = []
    for c in order:
        bits = [LABELS["slow" if estimate(c, budget) != "wont_fit" and is_slow(c, profile)
                       else estimate(c, budget)]]
        if profile is not None:
            bits.append(speed_of(c, profile).label())
        if c.file in installed:
            bits.append("installed")
        star = "★ " if c is pick else ""
        lines.append(Line(c.repo, f"{star}{c.title}\n{' · '.join(bits)}",
                          f"{c.line()}; estimated from its published size (its files' headers decide)"))
    heading = "Best for this computer (estimated from published sizes"
    heading += "" if profile is not None else "; run hisho bench speed once to see their speed here"
    heading += ")"
    if pick is not None:
        larger = why_not_larger(pick, budget, profile)
        heading += f": ★ {pick.title}" + (f". {larger}." if larger else ".")
    return lines, heading


def show_best(tab: HubTab) -> None:
    tab._seq += 1
    seq = tab._seq

    def done(found: tuple[list[Line], str]) -> None:
        if seq != tab._seq:
            return  # a search or a repository was asked for meanwhile
        lines, heading = found
        tab.results.clear()
        for line in lines:
            item = QListWidgetItem(line.text)
            item.setData(Qt.ItemDataRole.UserRole, line.repo)
            item.setToolTip(line.tip)
            tab.results.addItem(item)
        tab.say(heading)

    ops.hub(tab.workers, lambda: best_lines(tab)).success(done).quiet("no best-fit lines").run()
