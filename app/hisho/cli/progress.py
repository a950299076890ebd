"""Progress of a long command on stderr (``hisho summarize``): never minutes of silence.

On a terminal: one bar redrawn in place ("[######------] 37 % summarizing: chunk 3 of 8 · ETA 2 min · 41 s").
Anywhere else (a pipe, a log file, a CI job): plain lines, "hisho: summarizing report.pdf: chunk 3 of 8 · 37 % ·
ETA 2 min", one per step, and while a step takes long a line every ``HEARTBEAT_S`` saying it still runs.
stdout is left alone (the summary, the JSON). Rules of use: ``with StderrProgress() as progress:`` around the
job; ``note(text)`` for a step of its own (loading the model), ``progress(job_progress)`` as the job's
``on_progress`` (any thread).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from hisho.core.documents.job import JobProgress, duration

READING = ("reading", "writing", "saving")   # phases of a document read once (core/documents/progress.py)
HEARTBEAT_S = 15.0   # a plain-lines log says at least this often that the job still runs
REDRAW_S = 1.0       # the bar's elapsed time ticks this often
BAR = 24


class StderrProgress:
    def __init__(self, stream: IO[str] | None = None, *, tty: bool | None = None) -> None:
        self.out = stream if stream is not None else sys.stderr
        self.tty = bool(self.out.isatty()) if tty is None else tty
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_line = self._started
        self._state = ""       # what the job does now, for the bar and the heartbeat
        self._fraction: float | None = None
        self._eta = ""
        self._detail = ""
        self._bar_shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False

    def __enter__(self) -> StderrProgress:
        self._thread = threading.Thread(target=self._beat, name="hisho-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        with self._lock:
            if self._bar_shown:
                self.out.write("\n")
                self.out.flush()
                self._bar_shown = False

    @contextmanager
    def held(self) -> Iterator[None]:
        """Nothing is drawn inside (a question asked on the terminal)."""
        with self._lock:
            if self._bar_shown:
                self.out.write("\n")
                self._bar_shown = False
            self._held = True
        try:
            yield
        finally:
            with self._lock:
                self._held = False

    def note(self, text: str) -> None:
        """A step of its own ("loading SmolLM2-135M…")."""
        self._set(text, None)

    def __call__(self, p: JobProgress) -> None:
        text = p.message or p.stage
        if p.stage in ("summarizing", "combining"):  # "chunk 3 of 8" says which step, not of what
            text = f"{p.stage} {p.file}: {text}" if p.file else f"{p.stage}: {text}"
        elif p.stage in READING and p.file:           # "Reading page 3 of 9" names the phase itself
            text = f"{p.file}: {text}"
        fraction = p.done / p.total if p.total > 0 and p.stage not in ("done", "cancelled") else None
        eta = ""
        if fraction is not None and p.eta_s > 0 and p.stage in ("summarizing", "combining", *READING):
            eta = f" · ETA {duration(p.eta_s)}"
        if p.stage == "done":
            text = f"done in {duration(time.monotonic() - self._started)}"
        elif p.stage == "cancelled":
            text = "cancelled; what was read is kept, run it again to resume"
        self._set(text, fraction, eta, p.detail)

    # ----- output ----------------------------------------------------------------------------------------

    def _set(self, text: str, fraction: float | None, eta: str = "", detail: str = "") -> None:
        """A new line (plain output) only when ``text`` changes; ``detail`` (tokens read) only on the bar."""
        with self._lock:
            changed = text != self._state
            self._state, self._fraction, self._eta, self._detail = text, fraction, eta, detail
            if self._held:
                return
            if self.tty:
                self._draw()
            elif changed:
                percent = f" · {int(fraction * 100)} %" if fraction is not None else ""
                self._line(f"hisho: {text}{percent}{eta}")

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()
        self._last_line = time.monotonic()

    def _draw(self) -> None:
        elapsed = f" · {duration(time.monotonic() - self._started)}"
        if self._fraction is not None:
            filled = int(round(self._fraction * BAR))
            head = f"[{'#' * filled}{'-' * (BAR - filled)}] {int(self._fraction * 100):3d} % "
        else:
            head = ""
        detail = f" · {self._detail}" if self._detail else ""
        self.out.write(f"\r{head}{self._state}{detail}{self._eta}{elapsed}\033[K")
        self.out.flush()
        self._bar_shown = True

    def _beat(self) -> None:
        while not self._stop.wait(REDRAW_S):
            with self._lock:
                if not self._state or self._held:
                    continue
                if self.tty:
                    self._draw()
                elif time.monotonic() - self._last_line >= HEARTBEAT_S:
                    so_far = duration(time.monotonic() - self._started)
                    self._line(f"hisho: still {self._state}{self._eta} · {so_far} so far")
