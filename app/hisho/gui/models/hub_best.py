"""The Hub tab's first list, before any search: the models best for this computer.

The well-known instruct models of ``core.hub.suggest`` (no request: the estimate comes from their published
sizes), the one the first-run card would offer first: the best that fits and, where this machine's speed is
measured (``planner.speed``), answers at 8 tok/s or faster; then the others that fit and are fast enough here,
then those that fit but would answer slower (said on their line), then the ones that do not fit
(``suggest.ranked``). Each line says its fit and speed; one already installed says so. Nothing is starred
while this computer's speed is being measured. Picking one opens its repository, whose files the planner then judges from their headers.

Rules of use: ``show_best(tab)`` on the GUI thread; the estimate runs on the ``hub`` lane and is dropped when a
search or a repository was asked for meanwhile (the tab's sequence number).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidgetItem

from hisho.core.machine import Budget
from hisho.core.planner.speed import SpeedProfile
from hisho.gui import ops

if TYPE_CHECKING:
    from hisho.gui.models.hub_tab import HubTab



@dataclass(frozen=True)
class Line:
    repo: str
    text: str
    tip: str


def best_lines(tab: HubTab) -> tuple[list[Line], str]:
    """The candidates, best for this computer first, and a heading (runs on the hub lane)."""
    from hisho.core.planner import speed

    budget, _opts = tab.budget()
    return lines_for(budget, speed.load_profile(), frozenset(Path(e.path).name for e in tab.models.list()))


def lines_for(budget: Budget, profile: SpeedProfile | None, installed: frozenset[str]) -> tuple[list[Line], str]:
    """Pure: each candidate's short lines (title; fit and speed; time to read a page) in ``suggest.ranked``'s
    order, the pick starred, and the heading; no pick and no speed while this computer is being measured."""
    from hisho.core.hub.fit import LABELS
    from hisho.core.hub.suggest import (
        estimate,
        is_slow,
        offer_line,
        ranked,
        speed_of,
        suggest,
        why_not_larger,
    )

    pick = suggest(budget, profile, installed)
    lines = []
    for c in ranked(budget, profile, installed):
        verdict = estimate(c, budget)
        bits = [LABELS["slow" if verdict != "wont_fit" and is_slow(c, profile) else verdict]]
        rows = [f"{'★ ' if c is pick else ''}{c.title}"]
        if profile is not None:
            s = speed_of(c, profile)
            bits.append(f"~{s.decode_short:.0f} tok/s here")
            rows += [" · ".join(bits + (["installed"] if c.file in installed else [])),
                     f"reads 1,000 tokens in ~{s.read_s():.0f} s"]
        else:
            rows.append(" · ".join(bits + (["installed"] if c.file in installed else [])))
        lines.append(Line(c.repo, "\n".join(rows),
                          f"{c.line()}; estimated from its published size (its files' headers decide)"))
    if profile is None:
        return lines, ("Measuring this computer… a model is suggested once its speed is known (estimated from "
                       "published sizes).")
    if pick is None:
        return lines, "None of these fits this computer with room to spare (estimated from published sizes)."
    larger = why_not_larger(pick, budget, profile)
    return lines, (f"Best for this computer: ★ {offer_line(pick, profile)}" + (f". {larger}." if larger else ".")
                   + " Estimated from published sizes.")


def show_best(tab: HubTab) -> None:
    tab._seq += 1
    seq = tab._seq

    def done(found: tuple[list[Line], str]) -> None:
        if seq != tab._seq:
            return  # a search or a repository was asked for meanwhile
        lines, heading = found
        tab.results.clear()
        tab.results.setWordWrap(True)  # a narrow list wraps a line rather than eliding it
        for line in lines:
            item = QListWidgetItem(line.text)
            item.setData(Qt.ItemDataRole.UserRole, line.repo)
            item.setToolTip(line.tip)
            tab.results.addItem(item)
        tab.say(heading)

    ops.hub(tab.workers, lambda: best_lines(tab)).success(done).quiet("no best-fit lines").run()
