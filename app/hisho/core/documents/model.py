"""What extraction produces: a document as ordered sections, each with a reference a summary can cite.

A ``Section`` is the smallest unit chunking keeps whole where it can: a PDF page (ref "p. 12"), or the text
under a heading (ref "§ Results"), or a run of paragraphs in plain text (ref "line 40"). ``notes`` lists what
was left out (image-only pages, embedded pictures, pages the user asked to skip): the summary repeats them, so
nothing is dropped silently. ``cut`` is set only by a cut the user asked for (``PageSpan``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from hisho.core.errors import UserError


class DocumentError(UserError):
    """A file that cannot be summarized. ``str(exc)`` is the one line the user sees (it names the file)."""


class ReadingStopped(DocumentError):
    """The user stopped the reading of a file (a ``progress`` callback's ``stop`` said so between pages)."""


class PasswordNeeded(DocumentError):
    """An encrypted PDF: no password was given (``wrong`` False) or the one given does not open it."""

    def __init__(self, message: str, *, wrong: bool) -> None:
        super().__init__(message)
        self.wrong = wrong


@dataclass(frozen=True)
class Section:
    text: str
    ref: str          # what a summary cites: "p. 3", "§ Methods", "line 120"
    page: int = 0     # PDF page number (1-based), 0 when the format has no pages


@dataclass
class Document:
    path: Path
    kind: str                         # pdf, docx, text, markdown, rst, html
    sha256: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    encoding: str = ""                # text formats: the charset that was used to read the bytes
    pages: int = 0                    # PDF: page count
    cut: str = ""                     # what the user asked to leave out ("pp. 21–500"), "" when read whole

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)

    @property
    def chars(self) -> int:
        return sum(len(s.text) for s in self.sections)


@dataclass(frozen=True)
class PageSpan:
    """Pages the user asked to read, 1-based and inclusive (``hisho summarize --pages 1-20``)."""

    first: int
    last: int | None = None           # None: to the end

    @classmethod
    def parse(cls, spec: str) -> PageSpan:
        """"1-20", "5", "30-" (to the end); anything else is a ``UserError`` with the accepted forms."""
        text = spec.strip().replace("–", "-")
        head, dash, tail = text.partition("-")
        try:
            first = int(head)
            last = None if dash and not tail.strip() else int(tail if dash else head)
        except ValueError:
            raise UserError(f"--pages {spec!r}: give pages as 1-20, 5 or 30- (to the end)") from None
        if first < 1 or (last is not None and last < first):
            raise UserError(f"--pages {spec!r}: pages start at 1 and the range must not run backwards")
        return cls(first, last)

    def clamp(self, total: int) -> range:
        """The 0-based page indices to read of a ``total``-page file."""
        return range(self.first - 1, min(total, self.last or total))

    def __str__(self) -> str:
        return f"{self.first}-{self.last if self.last is not None else ''}"


def file_sha256(path: Path) -> str:
    """Hash the file in 1 MiB reads (a 500-page PDF never sits in memory for this)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def page_range(pages: list[int]) -> str:
    """"p. 3", "pp. 3–5" or "pp. 3–5, 9" for a sorted list of page numbers."""
    uniq = sorted(set(p for p in pages if p > 0))
    if not uniq:
        return ""
    runs: list[tuple[int, int]] = []
    for p in uniq:
        if runs and p == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], p)
        else:
            runs.append((p, p))
    parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs]
    return ("p. " if len(uniq) == 1 else "pp. ") + ", ".join(parts)
