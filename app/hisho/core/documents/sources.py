"""Which passages of the attached documents an answer rests on, and which documents a sent message carried.

- ``sources_for(parts, question, answer)``: up to ``LIMIT`` passages, shown under the answer and clickable to
  their text. First the passages the answer cites by reference ("[p. 3]", "[§ Methods]", as the prompts ask),
  then those whose words the answer shares most (SQLite FTS5's BM25 over the parts, as ``ask.rank_parts``), then
  those the question points to. An answer that shares nothing with any passage gets no sources: a passage is
  never shown as a source without a word in common.
- ``pages_of(ref)``, ``by_part(summary)``, ``summary_sources(...)``: which pages a summary rests on (a long
  document's summary lists its parts with their page ranges; one read whole gets its best-matching passages).
- ``lay_out(passages)``: a document's text as the viewer shows it, with where each passage lies in it.
- ``attachments_by_message(docs, messages)``: a document belongs to the first user message sent after it was
  attached (the one that asked about it), so the sent bubble shows what went with it.
Pure data in and out: no Qt, no model, no database.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

LIMIT = 3
EXCERPT_CHARS = 160
_CITED = re.compile(r"\[([^\[\]]{1,120})\]")
_WORD = re.compile(r"\w+", re.UNICODE)
# Words every English passage shares: left out of the match, so a source has a content word in common.
STOPWORDS = frozenset("""the and for are was were with that this from have has had not but you your they them their
there here what which who whom when where why how all any can could would should will shall may might must its
into onto over under about than then also just only very more most such some one two our out use used per via
yes does did doing done been being these those each other""".split())


def _content(text: str) -> str:
    return " ".join(w for w in _WORD.findall(text) if len(w) > 2 and w.lower() not in STOPWORDS)


@dataclass(frozen=True)
class Passage:
    document: str
    ref: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.document} · {self.ref}" if self.ref else self.document

    @property
    def excerpt(self) -> str:
        flat = " ".join(self.text.split())
        return flat if len(flat) <= EXCERPT_CHARS else flat[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " …"


def _norm(ref: str) -> str:
    return " ".join(ref.lower().replace("pp.", "p.").split())


def cited(passages: Sequence[Passage], answer: str) -> list[int]:
    """Indices of passages whose reference the answer names in brackets, in the order it names them."""
    out: list[int] = []
    for m in _CITED.finditer(answer):
        inside = _norm(m.group(1))
        for i, p in enumerate(passages):
            ref = _norm(p.ref)
            if ref and i not in out and (ref == inside or ref in inside.split("; ") or inside.endswith(", " + ref)
                                         or inside == _norm(p.label)):
                out.append(i)
    return out


class Ranker:
    """One in-memory FTS5 index of the passages, for ranking many answers (a chat's whole history) against
    them; ``ask.rank_parts`` builds one per call. Close it when done (or use ``with``)."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.con = sqlite3.connect(":memory:")
        self.con.execute("CREATE VIRTUAL TABLE parts USING fts5(body)")
        self.con.executemany("INSERT INTO parts(rowid, body) VALUES (?, ?)",
                             ((i, p.text) for i, p in enumerate(passages)))

    def rank(self, text: str) -> list[int]:
        """Indices of the passages sharing a content word with ``text``, best BM25 first."""
        terms = sorted({w.lower() for w in _content(text).split()})
        if not terms:
            return []
        query = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self.con.execute("SELECT rowid FROM parts WHERE parts MATCH ? ORDER BY bm25(parts), rowid", [query])
        return [int(r[0]) for r in rows]

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Ranker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def sources_for(passages: Sequence[Passage], question: str, answer: str, limit: int = LIMIT,
                ranker: Ranker | None = None) -> list[Passage]:
    """``ranker``: an index of ``passages`` made once for many answers; without one, one is made here."""
    if not passages or not answer.strip():
        return []
    if ranker is None:
        with Ranker(passages) as own:
            return sources_for(passages, question, answer, limit, own)
    order = cited(passages, answer)
    for i in ranker.rank(answer) + ranker.rank(question):
        if i not in order:
            order.append(i)
    return [passages[i] for i in order[:limit]]


SUMMARY_PAGES = 5
_PAGES = re.compile(r"\bpp?\.\s*([\d][\d\s,–-]*)")
_PART = re.compile(r"^- \[([^\[\]]+)\]", re.MULTILINE)


def pages_of(ref: str) -> list[int]:
    """The page numbers a reference names: "report.pdf, pp. 3–5, 9" -> [3, 4, 5, 9]; [] without pages."""
    out: list[int] = []
    for m in _PAGES.finditer(ref):
        for a, b in re.findall(r"(\d+)(?:\s*[–-]\s*(\d+))?", m.group(1)):
            out.extend(range(int(a), int(b or a) + 1))
    return out


def by_part(summary: str) -> list[str]:
    """The references of a long document's summary's parts, in order (its "By part:" list, written by
    ``SummaryJob`` from the map chunks' page ranges); [] for a summary read whole."""
    _, mark, tail = summary.rpartition("\nBy part:\n")
    return _PART.findall(tail) if mark else []


def summary_sources(passages: Sequence[Passage], summary: str, limit: int = SUMMARY_PAGES) -> list[list[int]]:
    """What the summary shows as its pages, each a run of passage indices: a long document's parts (the
    passages within each part's page range), else the passages the summary shares most with, in page order."""
    parts = by_part(summary)
    if parts:
        runs = []
        for ref in parts:
            pages = set(pages_of(ref))
            run = [i for i, p in enumerate(passages) if pages & set(pages_of(p.ref))]
            runs.append(run)
        return [r for r in runs if r]
    best = sources_for(passages, "", summary, limit)
    return [[i] for i in sorted(passages.index(p) for p in best)]


_LIST_ITEM = re.compile(r"^\s*(?:[-*•–]|\d{1,3}[.)]|[a-z][.)])\s")


def reflow(text: str) -> str:
    """``text`` as a reader wants it: the line breaks a PDF puts at the end of every printed line joined into
    paragraphs (a word hyphenated across them made whole), while blank lines, list items, and a short line that
    ends a sentence (a paragraph's last line) keep their breaks."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        width = max(len(line) for line in lines)
        para = lines[0]
        for prev, line in zip(lines, lines[1:], strict=False):
            ends_paragraph = prev[-1] in ".!?:" and len(prev) < 0.8 * width
            if _LIST_ITEM.match(line) or ends_paragraph:
                para += "\n" + line
            elif re.search(r"[a-z]-$", prev) and line[:1].islower():
                para = para[:-1] + line          # "exam-" + "ple": one word again
            else:
                para += " " + line
        out.append(para)
    return "\n\n".join(out)


def lay_out(passages: Sequence[Passage]) -> tuple[str, list[tuple[int, int]]]:
    """The text of a document's passages as one text (each under a line with its reference, reflowed: see
    ``reflow``), and the (start, end) character span of each passage's own text in it."""
    chunks: list[str] = []
    spans: list[tuple[int, int]] = []
    at = 0
    for p in passages:
        head = f"— {p.ref or p.document} —\n"
        body = reflow(p.text)
        chunks.append(head + body + "\n\n")
        spans.append((at + len(head), at + len(head) + len(body)))
        at += len(chunks[-1])
    return "".join(chunks).rstrip("\n"), spans


@dataclass(frozen=True)
class Attached:
    name: str
    added: float


@dataclass(frozen=True)
class Sent:
    id: int
    role: str
    created_at: float


def attachments_by_message(docs: Sequence[Attached], messages: Sequence[Sent]) -> dict[int, list[str]]:
    """user message id -> names of the documents attached just before it was sent (in attach order)."""
    out: dict[int, list[str]] = {}
    users = [m for m in messages if m.role == "user"]
    previous = float("-inf")
    for m in users:
        names = [d.name for d in docs if previous < d.added <= m.created_at]
        if names:
            out[m.id] = names
        previous = m.created_at
    return out
