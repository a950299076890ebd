"""What the window shows on the messages of a chat with documents, read in one go (``read_extras``). No Qt.

- On a sent message: the documents attached with it.
- On an answer: its numbered sources. An answer to a question that was given passages (a long document, or
  documents attached to a chat read in parts: ``ask.record_given``) shows exactly those, numbered in the order
  the model was given them; any other answer (a document read whole) its best-matching passages
  (``sources.sources_for``). Under it, "the document may not say this" when its key terms are not in what it
  rests on (``grounding.check``).
- On a summary: the pages it came from (a long document's parts with their page ranges, or the passages a
  summary read whole shares most with: ``sources.summary_sources``), and the "too small for summaries"
  verdict as a banner (``quality.banner_of``).
Each source points into a document's passages (``Shown.group``, ``first``..``last``) so the viewer can show the
whole text with that passage highlighted.

Rules of use: ``read_extras`` reads the database: call it on the store lane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hisho.core.documents.ask import given_for, load_attachment, question_key
from hisho.core.documents.grounding import check
from hisho.core.documents.model import page_range
from hisho.core.documents.quality import banner_of
from hisho.core.documents.sources import (
    Attached,
    Passage,
    Ranker,
    Sent,
    attachments_by_message,
    pages_of,
    sources_for,
    summary_sources,
)


@dataclass(frozen=True)
class Group:
    """One document's passages in order: what the viewer shows."""

    title: str
    passages: list[Passage]


@dataclass(frozen=True)
class Shown:
    """One numbered source: passages ``first..last`` of group ``group``."""

    number: int
    label: str
    group: int
    first: int
    last: int
    excerpt: str


@dataclass
class Found:
    conversation_id: int = 0
    names: dict[int, list[str]] = field(default_factory=dict)        # user message -> documents it carried
    sources: dict[int, list[Shown]] = field(default_factory=dict)    # answer or summary -> its sources
    summaries: set[int] = field(default_factory=set)                 # of those, the summaries (their pages)
    notes: dict[int, str] = field(default_factory=dict)              # answer -> "the document may not say this"
    banners: dict[int, str] = field(default_factory=dict)            # summary -> its quality verdict
    groups: list[Group] = field(default_factory=list)
    judged: set[int] = field(default_factory=set)                    # the messages this read looked at
    has_documents: bool = False


def _title(parts: Sequence[tuple[str, str]]) -> str:
    names = [ref.split(", ")[0] for ref, _ in parts if ", " in ref]
    uniq = [n for i, n in enumerate(names) if n not in names[:i]]
    return ", ".join(uniq) or "Document"


class _Index:
    """Where a passage lies among the groups, by its text."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.at = {p.text: (g, i) for g, grp in enumerate(groups) for i, p in enumerate(grp.passages)}

    def shown(self, number: int, label: str, text: str) -> Shown:
        g, i = self.at.get(text, (-1, -1))
        if g < 0:  # a passage of a document removed since: shown on its own
            self.groups.append(Group(label, [Passage("", label, text)]))
            g, i = len(self.groups) - 1, 0
            self.at[text] = (g, i)
        return Shown(number, label, g, i, i, self.groups[g].passages[i].excerpt)


def read_extras(documents: Any, cid: int, messages: Sequence[Any]) -> Found:
    """The chat's documents, which message carried each, each answer's sources and notes, each summary's
    pages and verdict. ``documents``: the root's ``Documents``; ``messages``: the branch on screen."""
    chat_docs = documents.chat_documents().attached(cid)
    db = documents.cache().db
    groups = [Group(d.name, [Passage(d.name, ref, text) for ref, text in d.parts]) for d in chat_docs]
    whole = [t for d in chat_docs for _, t in d.parts] if documents.chat_documents().approach(cid) == "whole" \
        else []
    summary = load_attachment(db, cid)
    summary_group = -1
    if summary is not None and summary.parts:
        groups.append(Group(_title(summary.parts), [Passage("", ref, text) for ref, text in summary.parts]))
        summary_group = len(groups) - 1
        whole += [t for _, t in summary.parts] if summary.approach == "whole" else []
    names = attachments_by_message([Attached(d.name, d.added) for d in chat_docs],
                                   [Sent(m.id, m.role, m.created_at) for m in messages])
    found = Found(cid, names, groups=groups, judged={m.id for m in messages}, has_documents=bool(groups))
    if not groups:
        return found
    given = given_for(db, cid)
    index = _Index(found.groups)
    passages = [p for g in groups for p in g.passages]
    by_id = {m.id: m for m in messages}
    with Ranker(passages) as ranker:  # one index for the whole history
        for m in messages:
            if m.role != "assistant" or not m.content.strip():
                continue
            parent = by_id.get(m.parent_id) if m.parent_id is not None else None
            question = parent.content if parent is not None and parent.role == "user" else ""
            if summary_group >= 0 and parent is not None and parent.parent_id is None:
                _summary(found, m.id, m.content, summary_group)
            elif question and question_key(question) in given:
                parts = given[question_key(question)]
                found.sources[m.id] = [index.shown(n, ref, text) for n, (ref, text) in enumerate(parts, 1)]
                # Given nothing, an answer is judged only when it speaks of the document (shares a content
                # word with it): "Hello! How can I help?" in a chat with a document is not about it.
                if parts or ranker.rank(m.content):
                    found.notes[m.id] = check(m.content, [t for _, t in parts]).note()
            else:
                best = sources_for(passages, question, m.content, ranker=ranker)
                found.sources[m.id] = [index.shown(n, p.label, p.text) for n, p in enumerate(best, 1)]
                if best and whole:  # about the document: it rests on the whole of it
                    found.notes[m.id] = check(m.content, whole).note()
    return found


def _summary(found: Found, message_id: int, text: str, group: int) -> None:
    passages = found.groups[group].passages
    shown = []
    for n, run in enumerate(summary_sources(passages, text), 1):
        first, last = passages[run[0]], passages[run[-1]]
        label = first.ref if len(run) == 1 else _span(first.ref, last.ref)
        shown.append(Shown(n, label, group, run[0], run[-1], first.excerpt))
    found.sources[message_id] = shown
    found.summaries.add(message_id)
    found.banners[message_id] = banner_of(text)


def _span(first: str, last: str) -> str:
    """"report.pdf, p. 3" to "report.pdf, pp. 5–6" -> "report.pdf, pp. 3–6"."""
    pages = pages_of(first) + pages_of(last)
    head = first.split(", ")[0] + ", " if ", " in first else ""
    return head + page_range(list(range(min(pages), max(pages) + 1))) if pages else f"{first} … {last}"
