"""``hisho summarize``'s progress on stderr: a bar redrawn in place on a terminal, lines elsewhere."""

from __future__ import annotations

import io

from hisho.cli.progress import StderrProgress
from hisho.core.documents.job import JobProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_bar_redrawn_in_place() -> None:
    out = Terminal()
    with StderrProgress(out) as progress:
        progress.note("loading SmolLM2…")
        progress(JobProgress("summarizing", 3, 8, 120.0, "report.pdf", "chunk 3 of 8"))
    text = out.getvalue()
    assert "\n" not in text.rstrip("\n")  # redrawn with \r, one line until the end
    last = text.rsplit("\r", 1)[1]
    assert last.startswith("[#########---------------]  37 % summarizing report.pdf: chunk 3 of 8 · ETA 2 minutes")
    assert text.endswith("\n")


def test_a_pipe_gets_plain_lines_once_per_step() -> None:
    out = io.StringIO()
    with StderrProgress(out) as progress:
        progress.note("loading SmolLM2…")
        progress(JobProgress("summarizing", 1, 4, 30.0, "a.txt", "chunk 1 of 4"))
        progress(JobProgress("summarizing", 1, 4, 30.0, "a.txt", "chunk 1 of 4"))  # same step: no new line
        progress(JobProgress("done", 1, 1, 0.0))
    lines = out.getvalue().splitlines()
    assert lines[0] == "hisho: loading SmolLM2…"
    assert lines[1] == "hisho: summarizing a.txt: chunk 1 of 4 · 25 % · ETA 30 seconds"
    assert lines[2].startswith("hisho: done in ") and len(lines) == 3
