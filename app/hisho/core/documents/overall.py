"""One bar for a whole summary, from the first page read to the chat it opens as, and an ETA that does not swing.

A job reports per phase (``progress.JobProgress``: extracting, planning, reading or summarizing, writing or
combining, saving, done) and each phase counts its own work from 0, so a bar fed those figures restarts; the
window then opens the result as a chat ("opening"), which the job does not report at all. ``Overall`` maps every
report onto one fraction of the whole, with a share of the bar per stage (``SPANS``: the reading of a document is
most of it, writing or combining most of the rest) and an equal slice per document, and never lets it go back.

The ETA (``SmoothEta``) starts from the job's own estimate (made from this machine's measured reading and
writing speeds) and follows later estimates through an exponential moving average, counting down between
reports; one update moves it by at most ``MAX_STEP`` times (up or down), so "3 min" does not become "7 min" and
then "1 min". Where the job has no estimate (no speed measured yet), the bar's own measured rate gives one.

Pure: figures in, figures out, the time passed in (``now``, seconds on any monotonic clock). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.documents.progress import JobProgress

EXTRACT_SHARE = 0.05     # reading the files' text, before any model work
OPEN_SHARE = 0.03        # the window opening the result as a chat (its documents attached)
# Each document's slice of the bar, by stage: (start, end) as fractions of the slice.
SPANS = {"planning": (0.0, 0.02), "reading": (0.02, 0.70), "summarizing": (0.02, 0.70),
         "writing": (0.70, 0.95), "combining": (0.70, 0.95), "saving": (0.95, 1.0)}
ALPHA = 0.3              # weight of a new estimate in the ETA's moving average
MAX_STEP = 1.5           # one update changes the ETA by at most this factor
RATE_MIN_FRACTION = 0.02  # the bar's own rate gives an ETA only once it has moved this much


@dataclass(frozen=True)
class Shown:
    fraction: float      # 0..1 of the whole summary, never less than the one before
    eta_s: float         # seconds left (0: not known yet)
    stage: str
    file: str

    @property
    def percent(self) -> int:
        """Whole percent; 100 only once the chat is open."""
        return 100 if self.fraction >= 1.0 else min(99, int(self.fraction * 100))


class SmoothEta:
    """The seconds left, counting down between updates, moved toward each new estimate by ``ALPHA`` and by at
    most ``MAX_STEP`` times per update."""

    def __init__(self) -> None:
        self.value = 0.0     # seconds left at ``at``
        self.at = 0.0

    def left(self, now: float) -> float:
        return max(0.0, self.value - (now - self.at)) if self.value > 0 else 0.0

    def update(self, estimate: float, now: float) -> float:
        if estimate <= 0:
            return self.left(now)
        if self.value <= 0:
            self.value, self.at = estimate, now
            return estimate
        expected = self.left(now)
        target = expected + ALPHA * (estimate - expected)
        base = max(expected, 1.0)   # overran its estimate: grows again from a second, boundedly
        self.value, self.at = min(max(target, base / MAX_STEP), base * MAX_STEP), now
        return self.value


class Overall:
    """Folds a job's reports (and the window's "opening"/"opened") into one ``Shown``: see the module docstring."""

    def __init__(self, files: int, started: float) -> None:
        self.files = max(1, files)
        self.started = started
        self.fraction = 0.0
        self.eta = SmoothEta()
        self.seen: list[str] = []        # documents in the order the job worked on them
        self._rate_from: tuple[float, float] | None = None  # (fraction, time) the bar's own rate counts from

    def position(self, p: JobProgress) -> float:
        """Where report ``p`` puts the bar, before the never-back rule."""
        part = min(1.0, p.done / p.total) if p.total > 0 else 0.0
        if p.stage == "extracting":
            return EXTRACT_SHARE * part
        if p.stage in ("done", "cancelled"):
            return 1.0 - OPEN_SHARE
        if p.stage == "opening":
            return 1.0 - OPEN_SHARE + OPEN_SHARE * part
        if p.stage == "opened":
            return 1.0
        if p.file and p.file not in self.seen:
            self.seen.append(p.file)
        index = self.seen.index(p.file) if p.file in self.seen else max(0, len(self.seen) - 1)
        start, end = SPANS.get(p.stage, (0.0, 0.0))
        slice_ = (1.0 - EXTRACT_SHARE - OPEN_SHARE) / self.files
        return EXTRACT_SHARE + slice_ * (min(index, self.files - 1) + start + (end - start) * part)

    def update(self, p: JobProgress, now: float) -> Shown:
        self.fraction = min(1.0, max(self.fraction, self.position(p)))
        if p.stage in ("done", "cancelled", "opening", "opened"):
            estimate = 0.0 if p.stage in ("cancelled", "opened") else p.eta_s
        else:
            estimate = p.eta_s if p.eta_s > 0 else self._rate_eta(now)
        if self._rate_from is None and self.fraction > 0:
            self._rate_from = (self.fraction, now)
        if p.stage in ("cancelled", "opened"):
            self.eta = SmoothEta()
            eta = 0.0
        else:
            eta = self.eta.update(estimate, now)
        return Shown(self.fraction, eta, p.stage, p.file)

    def left(self, now: float) -> float:
        """The ETA now (it counts down between reports)."""
        return self.eta.left(now)

    def _rate_eta(self, now: float) -> float:
        if self._rate_from is None:
            return 0.0
        f0, t0 = self._rate_from
        moved, took = self.fraction - f0, now - t0
        if moved < RATE_MIN_FRACTION or took <= 0:
            return 0.0
        return (1.0 - self.fraction) * took / moved
