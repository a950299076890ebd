""""Ask about it": a summary opens as a conversation with its documents attached. No Qt, no llama_cpp.

Two approaches, chosen once per conversation and shown to the user (``Attachment.note``):
- ``whole``: every document fits the context with room for questions. The documents go in the conversation's
  system prompt, so prompts are laid out [system + documents][summary turn][questions]. That prefix is the
  same for every question: ``precompute_kv`` prefills it once and saves it with the KV store
  (``document_owner``), so the first question prefills only the question.
- ``chunks``: too long for the context. The summary is the conversation's first answer (once: not in the system
  prompt as well); before each question the ``before_prompt`` hook (``DocumentContext``) appends the most
  relevant passages (SQLite FTS5's BM25) to the question, best first, each with its page/section reference.
  ``plan_chat`` sizes that prefix so the first question always fits with its passages and its answer: when the
  full summary would not leave that room, the chat holds the shorter level (the overview without the
  part-by-part list) and says so.
Attachments live in SQLite (component "documents", table doc_attachments), keyed by conversation id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hisho.core.documents.model import Document
from hisho.core.documents.reading import ASK_WHOLE as ASK_WHOLE
from hisho.core.documents.reading import PrefixReading, summary_request, whole_system
from hisho.core.documents.sources import Passage, Ranker

log = logging.getLogger("hisho.documents")

ASK_CHUNKS = ("You answer questions about a long document. Each question comes with the parts of the document "
              "most relevant to it, with their references; answer from those parts and cite them in brackets. "
              "If they do not say, say so. Your first answer below is a summary of the whole document.")
QUESTION_ROOM = 1024   # tokens kept free for questions and answers in the whole-document approach
PASSAGE_TOKENS = 256   # a retrieval passage: a page, or a part of a long one (a summary's ``parts``)
PASSAGE_SHARE = 8      # a question about a long document gets at most n_ctx / 8 tokens of its passages
ANSWER_SHARE = 4       # and a quarter of the context is kept for its answer (``DocumentContext``)
ASKING_TOKENS = 256    # room for the question itself in a long document's chat

BY_PART = "\n\nBy part:\n"   # what starts a long document's part-by-part list, after its overview
_BY_PART_LIST = re.compile(r"\n\nBy part:\n(?:- [^\n]*(?:\n|$))*")

Count = Callable[[str], int]
Parts = list[tuple[str, str]]   # (reference, text), a question's passages or a document's


@dataclass
class Attachment:
    approach: str                                   # "whole" or "chunks"
    system_prompt: str
    note: str                                       # what the UI shows about how questions are answered
    parts: list[tuple[str, str]] = field(default_factory=list)   # (refs, text) for retrieval


def attach(docs: Sequence[Document], summary: str, count: Count, n_ctx: int,
           parts: list[tuple[str, str]] | None = None) -> Attachment:
    """Decide how questions about ``docs`` are answered. ``parts`` are the job's chunks (refs, text); without
    them each section is a part."""
    whole = whole_system(docs)
    if count(whole) + count(summary) + QUESTION_ROOM <= n_ctx:
        return whole_attachment(docs)
    chunks = parts or [(s.ref, s.text) for d in docs for s in d.sections]
    return Attachment("chunks", ASK_CHUNKS,
                      f"The document is longer than the context ({n_ctx:,} tokens): each question is answered "
                      "from its most relevant parts, which the answer cites.", chunks)


def summary_levels(summary: str) -> list[str]:
    """A summary's levels of the hierarchy, longest first: the whole text, then (when it has one) the text
    without its part-by-part lists (each document's overview, its notes and what was not included)."""
    short = re.sub(r"\n{3,}", "\n\n", _BY_PART_LIST.sub("\n\n", summary)).strip()
    return [summary] if short == summary.strip() else [summary, short]


def question_room(n_ctx: int) -> int:
    """What the first question about a long document needs beside its chat's prefix: the question, its
    passages (``n_ctx / PASSAGE_SHARE``) and the answer (``n_ctx / ANSWER_SHARE``)."""
    return ASKING_TOKENS + n_ctx // PASSAGE_SHARE + n_ctx // ANSWER_SHARE


def context_for(prefix_tokens: int) -> int:
    """The smallest context (a multiple of 1,024) whose ``question_room`` leaves ``prefix_tokens`` free."""
    n_ctx = 1024
    while n_ctx - question_room(n_ctx) < prefix_tokens:
        n_ctx += 1024
    return n_ctx


def chat_prefix(system: str, names: str, summary: str) -> list[dict[str, str]]:
    """The messages a summary's conversation starts with, as ``ChatService.prompt_messages`` builds them."""
    head = [{"role": "system", "content": system}] if system.strip() else []
    return head + [{"role": "user", "content": summary_request(names)}, {"role": "assistant", "content": summary}]


@dataclass
class ChatPlan:
    """How a summary opens as a chat: the attachment, the summary the chat holds (its first answer) and the
    chat's prefix messages (what the job saves and the chat restores, token for token)."""
    attachment: Attachment
    summary: str
    messages: list[dict[str, str]]
    prefix_tokens: int
    shortened: bool = False


def plan_chat(docs: Sequence[Document], levels: Sequence[str], count: Count,
              count_messages: Callable[[list[dict[str, str]]], int], n_ctx: int,
              parts: list[tuple[str, str]] | None = None) -> ChatPlan:
    """Size the chat a summary opens as. ``levels`` are the summary's levels of the hierarchy, longest first
    (the full summary with its part-by-part list, then the overview alone). A long document's chat holds the
    longest level whose prefix leaves ``question_room`` free, so its first question fits with its passages and
    an answer; when even the shortest does not, the shortest (the chat is as small as it can be made)."""
    names = ", ".join(d.name for d in docs)
    att = attach(docs, levels[0], count, n_ctx, parts)
    if att.approach == "whole":
        msgs = chat_prefix(att.system_prompt, names, levels[0])
        return ChatPlan(att, levels[0], msgs, count_messages(msgs))
    room = n_ctx - question_room(n_ctx)
    sized = [(text, chat_prefix(att.system_prompt, names, text)) for text in levels]
    counted = [(text, msgs, count_messages(msgs)) for text, msgs in sized]
    pick = next((c for c in counted if c[2] <= room), counted[-1])
    shortened = pick is not counted[0]
    if shortened:
        att.note += (f" To leave room for a question, its pages and the answer in the {n_ctx:,}-token context, "
                     "this chat holds the short summary (the overview without the part-by-part list); a context "
                     f"of {context_for(counted[0][2]):,} tokens would hold the whole summary.")
        log.info("summary chat for %s: the short summary (%d prefix tokens; the full one: %d of %d allowed)",
                 names, pick[2], counted[0][2], room)
    return ChatPlan(att, pick[0], pick[1], pick[2], shortened)


def whole_attachment(docs: Sequence[Document]) -> Attachment:
    """The ``whole`` approach (the summary was written on this very prefix: ``hisho.core.documents.reading``).
    Its parts are the documents' sections (pages), named as a long document's are ("report.pdf, p. 3"): the
    model is given them all, and the answers' sources and the summary's pages are chosen among them."""
    parts = [(f"{d.name}, {s.ref}" if s.ref else d.name, s.text) for d in docs for s in d.sections if s.text.strip()]
    return Attachment("whole", whole_system(docs), "Whole document in context, read once: its KV is computed once "
                                                  "and reused, so a question costs only its own tokens.", parts)


def rank_parts(parts: Parts, question: str) -> list[int]:
    """Indices of the parts that share a content word with ``question`` (common words left out: a page that
    shares only "the" is not relevant), best first, by SQLite FTS5's ``bm25()`` (``sources.Ranker``)."""
    if not parts:
        return []
    with Ranker([Passage("", ref, text) for ref, text in parts]) as ranker:
        return ranker.rank(question)


def relevant_parts(parts: Parts, question: str, count: Count, budget: int) -> list[int]:
    """Indices of the parts to show with ``question``: best FTS5 BM25 score first until ``budget`` tokens are
    used, in that order. Parts that share no content word with the question are never picked.

    Best first, not in document order: the answer's sources are these passages numbered as given, so source
    1 is the best match, and a small model reads the likeliest passage first."""
    picked, used = [], 0
    for i in rank_parts(parts, question):
        cost = count(parts[i][1]) + 8
        if used + cost > budget:
            continue
        picked.append(i)
        used += cost
    return picked


def given_parts(att: Attachment, question: str, count: Count, budget: int) -> Parts:
    """The passages ``question`` is given, in the order given."""
    return [att.parts[i] for i in relevant_parts(att.parts, question, count, budget)]


def with_parts(question: str, given: Parts) -> str:
    """The outgoing question with its passages (the stored message stays ``question``)."""
    if not given:
        return question
    shown = "\n\n".join(f"[{ref}]\n{text}" for ref, text in given)
    return f"Relevant parts of the document:\n\n{shown}\n\nQuestion: {question}"



# ----- storage and the chat hook ---------------------------------------------------------------------------


def save_attachment(db: Any, conversation_id: int, att: Attachment, doc_shas: list[str]) -> None:
    with db.transaction():
        db.upsert("doc_attachments", {"conversation_id": conversation_id, "approach": att.approach,
                                      "note": att.note, "parts": json.dumps(att.parts),
                                      "doc_shas": json.dumps(doc_shas)}, pk="conversation_id")


def load_attachment(db: Any, conversation_id: int) -> Attachment | None:
    row = db.query_one("SELECT approach, note, parts FROM doc_attachments WHERE conversation_id=?",
                       [conversation_id])
    if row is None:
        return None
    return Attachment(str(row[0]), "", str(row[1]), [(str(a), str(b)) for a, b in json.loads(row[2])])


def question_key(question: str) -> str:
    """What a question's passages are kept under: its text as stored (the answer's parent message)."""
    return hashlib.sha256(question.strip().encode("utf-8")).hexdigest()


def record_given(db: Any, conversation_id: int, question: str, given: Parts) -> None:
    """Keep which passages ``question`` was given (none is kept too: the answer then rests on nothing). The
    same question asked again in the chat keeps the passages of its last asking."""
    with db.transaction():
        db.upsert("doc_given", {"conversation_id": conversation_id, "question": question_key(question),
                                "parts": json.dumps(given), "created": time.time()},
                  pk=("conversation_id", "question"))


def given_for(db: Any, conversation_id: int) -> dict[str, Parts]:
    """question_key -> the passages it was given, for every question of the chat that was given some."""
    rows = db.query("SELECT question, parts FROM doc_given WHERE conversation_id=?", [conversation_id])
    return {str(r["question"]): [(str(a), str(b)) for a, b in json.loads(r["parts"])] for r in rows}


class DocumentContext:
    """A ``ChatService.before_prompt`` hook: for a conversation with a long document attached, replace the
    last user message of the outgoing prompt (not the stored one) by the question with its relevant parts."""

    def __init__(self, db: Any, count: Count, n_ctx: Callable[[], int]) -> None:
        self.db = db
        self.count = count
        self.n_ctx = n_ctx

    def __call__(self, turn: Any, messages: list[dict[str, str]]) -> None:
        self.shape(turn, messages)

    def shape(self, turn: Any, messages: list[dict[str, str]]) -> Parts | None:
        """As the hook; returns the passages given (None when the chat has no long document)."""
        att = load_attachment(self.db, int(turn.conversation_id))
        if att is None or att.approach != "chunks" or not messages or messages[-1].get("role") != "user":
            return None
        used = sum(self.count(m["content"]) for m in messages)
        # Passages are the document read again: a few best ones, not half the context (docs/summarization.md).
        # They must fit beside the prompt with a quarter of the context left for the answer.
        n_ctx = self.n_ctx()
        budget = max(0, min(n_ctx - n_ctx // 4 - used, n_ctx // PASSAGE_SHARE))
        given = given_parts(att, messages[-1]["content"], self.count, budget)
        messages[-1] = {"role": "user", "content": with_parts(messages[-1]["content"], given)}
        return given


def open_conversation(store: Any, db: Any, docs: Sequence[Document], summary: str, count: Count, n_ctx: int,
                      parts: list[tuple[str, str]] | None = None) -> tuple[int, Attachment]:
    """Create the conversation a summary opens as: system prompt per the approach, then the request and the
    summary as its first turn. Returns (conversation id, attachment)."""
    att = attach(docs, summary, count, n_ctx, parts)
    return save_conversation(store, db, docs, summary, att), att


def find_conversation(store: Any, db: Any, docs: Sequence[Document], summary: str) -> int | None:
    """The conversation this summary of ``docs`` already opened as (not deleted, its first answer this very
    summary), so summarizing the same file again opens it instead of making a second "Summary: …" chat."""
    rows = db.query("SELECT a.conversation_id FROM doc_attachments a JOIN conversations c ON c.id = a.conversation_id "
                    "WHERE a.doc_shas = ? AND c.deleted_at IS NULL ORDER BY a.conversation_id",
                    [json.dumps([d.sha256 for d in docs])])
    request = summary_request(", ".join(d.name for d in docs))
    for row in rows:
        cid = int(row["conversation_id"])
        head = [(m.role, m.content) for m in store.branch(cid)[:2]]
        if head == [("user", request), ("assistant", summary)]:
            return cid
    return None


def save_conversation(store: Any, db: Any, docs: Sequence[Document], summary: str, att: Attachment) -> int:
    """The store side of ``open_conversation`` (no engine call: it may run on the store lane)."""
    names = ", ".join(d.name for d in docs)
    conv = store.create(f"Summary: {names}"[:120], system_prompt=att.system_prompt)
    ask = store.add_message(conv.id, "user", summary_request(names))
    store.add_message(conv.id, "assistant", summary, parent_id=ask.id)
    save_attachment(db, conv.id, att, [d.sha256 for d in docs])
    log.info("conversation %s opened for %s (%s)", conv.id, names, att.approach)
    return int(conv.id)


def precompute_kv(client: Any, messages: list[dict[str, str]], kv: Any = None, owner: str = "",
                  seq: int = 0) -> int:
    """Make the chat sequence hold the conversation prefix (documents + summary turn): restored from the KV
    store where ``owner``'s prefix is saved, the rest read; with a KV session it is saved under ``owner`` so it
    survives a restart. Returns the prefix length in tokens."""
    if seq != 0:
        raise ValueError("documents are kept on the chat sequence (0)")
    return PrefixReading(client, kv if owner else None, owner).keep(messages).prompt_tokens
