"""What a summary job reports while it runs: ``JobProgress`` and the meters that turn the engine's reading
progress into named phases with tokens read of tokens total and an ETA. No Qt.

Phases (``JobProgress.stage``): extracting, planning, reading ("Reading page 14 of 60": a document read once on
the chat's prefix), writing ("Writing the summary"), saving ("Saving for follow-up questions"), summarizing
(the map phase of a long document: its chunks read in parallel), combining, done, cancelled.

Rules of use: a meter's ``tick`` runs on the job's progress ticker (``hisho.core.documents.reading.Ticker``),
its ``token`` on the job's thread; both call the job's report function, which may run on any thread.
The ETA comes from this machine's measured reading speed for this model: the stored one before the first
progress event, the one measured in this reading after it.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass

from hisho.core.documents.model import Document
from hisho.core.engine.protocol import Progress

WRITE_SHARE = 0.6   # a summary usually ends before its budget: the ETA counts 60 % of the reply tokens
TOKEN_REPORT_S = 0.25


@dataclass
class JobProgress:
    stage: str            # see the module docstring
    done: int
    total: int
    eta_s: float
    file: str = ""
    message: str = ""
    detail: str = ""      # "3,120 of 9,204 tokens": changes every tick (a bar shows it, a log line does not)


Report = Callable[[JobProgress], None]


class PageFinder:
    """The page (or share) of a document at a fraction of its text: sections' character ends, bisected."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.ends: list[int] = []
        pos = 0
        for s in doc.sections:
            pos += len(s.text) + 2
            self.ends.append(pos)
        self.pages = max((s.page or 0 for s in doc.sections), default=0)

    def where(self, fraction: float) -> str:
        if not self.ends:
            return f"Reading {self.doc.name}"
        i = min(len(self.ends) - 1, bisect.bisect_left(self.ends, int(fraction * self.ends[-1])))
        page = self.doc.sections[i].page
        if page and self.pages:
            return f"Reading page {page} of {self.pages}"
        return f"Reading {self.doc.name}: {self.doc.sections[i].ref}"


class WholeMeter:
    """Progress of a document read once on the chat prefix, then its summary written on it."""

    def __init__(self, report: Report, doc: Document, prompt_tokens: int, reply_tokens: int,
                 speeds: tuple[float, float] | None) -> None:
        self.report = report
        self.doc = doc
        self.pages = PageFinder(doc)
        self.prompt_tokens = max(1, prompt_tokens)
        self.reply_tokens = max(1, reply_tokens)
        self.prefill, self.decode = speeds or (0.0, 0.0)
        self.written = 0
        self._started = time.monotonic()
        self._last_token = 0.0
        self._writing_since = 0.0

    def tick(self, progress: Progress | None, elapsed: float) -> None:
        if self.written or progress is None or progress.total <= 0:
            if not self.written:  # no progress event yet: the engine is restoring or starting to read
                self.report(JobProgress("reading", 0, self.prompt_tokens, self.eta(0, 0.0), self.doc.name,
                                        self.pages.where(0.0), f"0 of {self.prompt_tokens:,} tokens"))
            return
        held = max(0, self.prompt_tokens - progress.total)   # restored from disk or already in the sequence
        done = held + progress.done
        if progress.done > 0 and elapsed > 0:
            self.prefill = progress.done / elapsed   # this reading's own speed from here on
        self.report(JobProgress("reading", done, self.prompt_tokens, self.eta(done, elapsed), self.doc.name,
                                self.pages.where(done / self.prompt_tokens),
                                f"{done:,} of {self.prompt_tokens:,} tokens"))

    def token(self, n: int) -> None:
        now = time.monotonic()
        if not self._writing_since:
            self._writing_since = now
        self.written = n
        if now - self._last_token < TOKEN_REPORT_S and n > 1:
            return
        self._last_token = now
        if n > 2:
            self.decode = (n - 1) / max(now - self._writing_since, 1e-3)
        left = max(0.0, self.reply_tokens * WRITE_SHARE - n) / self.decode if self.decode > 0 else 0.0
        self.report(JobProgress("writing", min(n, self.reply_tokens), self.reply_tokens, left, self.doc.name,
                                "Writing the summary", f"{n} tokens written"))

    def saving(self) -> None:
        self.report(JobProgress("saving", 1, 1, 0.0, self.doc.name, "Saving for follow-up questions"))

    def eta(self, done: int, elapsed: float) -> float:
        if self.prefill <= 0 or self.decode <= 0:
            return 0.0
        return (self.prompt_tokens - done) / self.prefill + self.reply_tokens * WRITE_SHARE / self.decode


class MapMeter:
    """Progress of a map (or combine) batch: prompt tokens read of all the batch's prompt tokens plus reply
    tokens of finished items, so the bar moves while chunks are read, not only when one finishes."""

    def __init__(self, report: Report, stage: str, file: str, label: str, finished: int, total: int,
                 reply_tokens: int, base_eta: float) -> None:
        self.report = report
        self.stage, self.file, self.label = stage, file, label
        self.finished, self.total = finished, total
        self.reply_tokens = reply_tokens
        self.read = 0
        self.to_read = 0
        self.base_eta = base_eta
        self._started = time.monotonic()

    def tick(self, progress: Progress | None, elapsed: float) -> None:
        if progress is not None and progress.total > 0:
            self.read, self.to_read = progress.done, progress.total
        self._send(elapsed)

    def item_done(self, finished: int, eta: float) -> None:
        self.finished, self.base_eta = finished, eta
        self._started = time.monotonic()
        self._send(0.0)

    def _send(self, since: float) -> None:
        work = self.to_read + self.total * self.reply_tokens
        done = self.read + self.finished * self.reply_tokens
        detail = f"{self.read:,} of {self.to_read:,} tokens read" if self.to_read else ""
        eta = max(0.0, self.base_eta - since) if self.base_eta > 0 else 0.0
        self.report(JobProgress(self.stage, min(done, work), max(work, 1), eta, self.file,
                                f"{self.label} {self.finished} of {self.total}", detail))
