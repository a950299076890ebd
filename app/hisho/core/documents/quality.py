"""Is a summary a summary? Two measures a reader would apply, on word sequences:

- **copied**: the share of the summary's 8-word runs that appear word for word in the source. A real summary
  quotes a phrase here and there (well under a third); a model too small for the task hands the text back.
- **repeated**: the share of the summary's 8-word runs that already appeared earlier in the summary: a model
  stuck in a loop says the same thing again and again.

A summary of fewer than ``MIN_WORDS`` words is not judged (too short to tell). Past ``COPIED_LIMIT`` or
``REPEATED_LIMIT`` the verdict says the loaded model is too small for summaries, and names a model that fits
this machine (``core.hub.suggest``), so the user knows the result is not what Hisho can do.
Pure text in, a verdict out: no model, no Qt.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hisho.core.machine import Budget
from hisho.core.planner.speed import SpeedProfile

N = 8
MIN_WORDS = 24
COPIED_LIMIT = 0.5
REPEATED_LIMIT = 0.35
TOO_SMALL = "is too small for summaries"   # the verdict's words; ``banner_of`` finds the verdict by them
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class SummaryQuality:
    copied: float
    repeated: float
    words: int

    @property
    def verdict(self) -> str:
        """ok | copied | repetitive"""
        if self.words < MIN_WORDS:
            return "ok"
        if self.copied >= COPIED_LIMIT:
            return "copied"
        if self.repeated >= REPEATED_LIMIT:
            return "repetitive"
        return "ok"

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"copied": round(self.copied, 3), "repeated": round(self.repeated, 3), "words": self.words,
                "verdict": self.verdict}


def _grams(words: list[str]) -> Iterator[tuple[str, ...]]:
    return (tuple(words[i:i + N]) for i in range(len(words) - N + 1))


def judge(summary: str, source: str) -> SummaryQuality:
    words = [w.lower() for w in _WORD.findall(summary)]
    grams = list(_grams(words))
    if not grams:
        return SummaryQuality(0.0, 0.0, len(words))
    wanted = set(grams)
    source_words = [w.lower() for w in _WORD.findall(source)]
    # Only the summary's runs are kept, so a long source costs one pass and no set of its own.
    found = {g for g in _grams(source_words) if g in wanted}
    copied = sum(1 for g in grams if g in found) / len(grams)
    seen: set[tuple[str, ...]] = set()
    again = 0
    for g in grams:
        if g in seen:
            again += 1
        seen.add(g)
    return SummaryQuality(copied, again / len(grams), len(words))


def warning(quality: SummaryQuality, model_name: str, suggestion: str | None, measured: bool = True) -> str:
    """One short paragraph for the user; "" when the summary is fine. ``measured``: this machine's speed is
    known (without it no model is named: ``suggest`` offers none before)."""
    if quality.ok:
        return ""
    what = (f"mostly text copied from the document ({quality.copied:.0%})" if quality.verdict == "copied"
            else f"mostly repetition ({quality.repeated:.0%} repeats itself)")
    line = f"This summary is {what}: the model {model_name} {TOO_SMALL}."
    if suggestion:
        return f"{line} A model that fits this machine: {suggestion}, on the Models page."
    if not measured:
        return f"{line} A larger model is needed: the Models page names one once this computer's speed is measured."
    return f"{line} A larger model is needed; this machine has little memory to spare for one."


def banner_of(summary: str) -> str:
    """The verdict a summary carries (``SummaryJob`` keeps ``warning``'s text on it, after a "⚠ "), for the
    window to show as a banner over it; "" when it carries none."""
    for paragraph in summary.split("\n\n"):
        if paragraph.startswith("⚠ ") and TOO_SMALL in paragraph:
            return paragraph[2:].strip()
    return ""


def advice(qualities: list[dict[str, Any]], model_name: str, budget: Budget,
           profile: SpeedProfile | None) -> tuple[str, dict[str, Any] | None]:
    """(warning, suggested model) for a job's per-document ``SummaryQuality.to_dict()``s; the worst one counts.
    ("", None) when every summary is fine. The model named is the first-run card's and the Hub's
    (``suggest.suggest`` with this machine's speed ``profile``), in the same words and speed."""
    from hisho.core.hub.suggest import offer_line, speed_of, suggest

    bad = [q for q in qualities if q.get("verdict", "ok") != "ok"]
    if not bad:
        return "", None
    worst = max(bad, key=lambda q: max(q["copied"], q["repeated"]))
    pick = suggest(budget, profile)
    text = warning(SummaryQuality(worst["copied"], worst["repeated"], worst["words"]), model_name,
                   offer_line(pick, profile) if pick and profile else None, measured=profile is not None)
    if pick is None or profile is None:
        return text, None
    return text, {"title": pick.title, "spec": pick.spec, "size": pick.size,
                  "decode_tps": round(speed_of(pick, profile).decode_short, 1)}
