"""Documents attached to an ordinary chat (the paperclip, or a file dropped on the message box). No Qt, no
llama_cpp.

Unlike File → Summarize, attaching runs no summary: the file is read (``extract``, the same reader, with the same
password prompt for an encrypted PDF), its tokens are counted, and it is kept with the chat (table
``chat_documents``, component "documents"). How the model sees it, decided on each prompt from the stored counts:
- ``whole``: every attached document together fits in ``WHOLE_SHARE`` of the context. They go at the end of the
  system message (``context``, a ``ChatService.prompt_context`` hook, so the context meter, the KV prefetch and
  type-ahead all see the same prompt). That prefix is the same for every question: the chat's saved KV holds it,
  and after the first question only new words are prefilled. ``Documents.attach_to_chat`` prefills and saves it
  at once.
- ``parts``: too long. Before each question the most relevant parts (SQLite FTS5's BM25, ``ask.relevant_parts``)
  are added to the outgoing question, best first, with their page/section references (``before_prompt``); the
  stored message is unchanged, and which parts were given is kept (``ask.record_given``, by ``Documents``).
The chat's own system prompt is never edited: removing a document (the × on its chip) takes it out of the next
prompt. Rows go with the conversation (ON DELETE CASCADE when a deleted chat is purged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hisho.core.documents.ask import Attachment, Parts, given_parts, with_parts
from hisho.core.documents.extract import extract
from hisho.core.documents.model import Document, DocumentError, PasswordNeeded
from hisho.core.documents.schema import COMPONENT, STEPS

log = logging.getLogger("hisho.documents")

WHOLE_SHARE = 0.5            # attached documents go in the prompt whole while they take at most this much context
MAX_CHARS = 4_000_000        # ~1M tokens, ~1,500 pages: beyond this, attaching is refused (Summarize instead)
CHARS_PER_TOKEN = 4          # estimate for documents far too long to be shown whole (not worth counting exactly)
CHAT_HEAD = ("The user attached the documents below to this chat. Use them to answer where they are relevant, "
             "citing page or section references in brackets; if they do not say, say so.")
PARTS_NOTE = ("{names}: longer than half the context ({n_ctx} tokens), so each question gets the document's "
              "most relevant parts, which the answer cites.")
WHOLE_NOTE = "{names}: read whole with each question; its KV is kept with the chat, so a question costs only its "\
             "own tokens."

Count = Callable[[str], int]
AskPassword = Callable[[str, bool], str | None]


@dataclass
class ChatDocument:
    id: int
    conversation_id: int
    name: str
    sha256: str
    tokens: int
    parts: list[tuple[str, str]] = field(default_factory=list)   # (reference, text), in document order
    added: float = 0.0                                          # when it was attached (time.time())

    @property
    def text(self) -> str:
        return "\n\n".join(t for _, t in self.parts)


def read_document(path: Path, password: str | None = None, ask_password: AskPassword | None = None,
                  stop: Callable[[], bool] = lambda: False, **options: Any) -> Document:
    """``extract`` one file; an encrypted PDF asks ``ask_password`` (up to 3 tries), which answers None to skip
    it (then a DocumentError says so). ``options``: ``extract``'s (progress, pages)."""
    for _ in range(3):
        try:
            return extract(path, password=password, **options)
        except PasswordNeeded as exc:
            if ask_password is None or stop():
                raise
            password = ask_password(path.name, exc.wrong)
            if not password:
                raise DocumentError(f"{path.name}: the PDF is encrypted and no password was given") from None
    raise DocumentError(f"{path.name}: wrong password for this encrypted PDF (3 tries)")


class ChatDocuments:
    """The chat_documents table and the two prompt hooks. Thread-safe (``Database`` serializes access)."""

    def __init__(self, db: Any, count: Count, n_ctx: Callable[[], int]) -> None:
        self.db = db
        self.count = count
        self.n_ctx = n_ctx

    # ----- rows ------------------------------------------------------------------------------------------

    def attached(self, conversation_id: int) -> list[ChatDocument]:
        rows = self.db.query("SELECT id, conversation_id, name, sha256, tokens, parts, added FROM chat_documents "
                             "WHERE conversation_id=? ORDER BY id", [conversation_id])
        return [ChatDocument(int(r["id"]), int(r["conversation_id"]), str(r["name"]), str(r["sha256"]),
                             int(r["tokens"]), [(str(a), str(b)) for a, b in json.loads(r["parts"])],
                             float(r["added"])) for r in rows]

    def add(self, conversation_id: int, doc: Document) -> ChatDocument:
        """Keep ``doc`` with the chat (the same file twice is kept once). Counting runs on the engine."""
        if doc.chars > MAX_CHARS:
            raise DocumentError(f"{doc.name}: too long to attach ({doc.chars:,} characters; the limit is "
                                f"{MAX_CHARS:,}). File → Summarize reads it in parts.")
        for old in self.attached(conversation_id):
            if old.sha256 == doc.sha256:
                return old
        if doc.chars // CHARS_PER_TOKEN > 2 * max(self.n_ctx(), 1):
            tokens = doc.chars // CHARS_PER_TOKEN   # far beyond the context either way: an estimate will do
        else:
            tokens = self.count(doc.text)
        parts = [(s.ref, s.text) for s in doc.sections if s.text.strip()]
        now = time.time()
        with self.db.transaction():
            cur = self.db.execute("INSERT INTO chat_documents (conversation_id, name, sha256, tokens, parts, added)"
                                  " VALUES (?,?,?,?,?,?)", [conversation_id, doc.name, doc.sha256, tokens,
                                                            json.dumps(parts), now])
        log.info("%s attached to conversation %s (%d tokens)", doc.name, conversation_id, tokens)
        return ChatDocument(int(cur.lastrowid or 0), conversation_id, doc.name, doc.sha256, tokens, parts, now)

    def remove(self, document_id: int) -> None:
        with self.db.transaction():
            self.db.execute("DELETE FROM chat_documents WHERE id=?", [document_id])

    # ----- how the model sees them -----------------------------------------------------------------------

    def approach(self, conversation_id: int) -> str:
        """"whole", "parts", or "" when there are none (see the module docstring). Reads only the counts."""
        row = self.db.query_one("SELECT count(*), coalesce(sum(tokens), 0) FROM chat_documents "
                                "WHERE conversation_id=?", [conversation_id])
        if row is None or not row[0]:
            return ""
        return "whole" if int(row[1]) <= self.n_ctx() * WHOLE_SHARE else "parts"

    def note(self, conversation_id: int) -> str:
        """What the window says about how questions are answered."""
        kind = self.approach(conversation_id)
        if not kind:
            return ""
        names = ", ".join(d.name for d in self.attached(conversation_id))
        return (WHOLE_NOTE if kind == "whole" else PARTS_NOTE).format(names=names, n_ctx=self.n_ctx())

    def context(self, conversation_id: int, messages: list[dict[str, str]]) -> None:
        """``ChatService.prompt_context`` hook: attached documents that fit go at the end of the system message."""
        if self.approach(conversation_id) != "whole":
            return
        docs = self.attached(conversation_id)
        block = CHAT_HEAD + "".join(f"\n\n# {d.name}\n\n{d.text}" for d in docs)
        if messages and messages[0].get("role") == "system":
            messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{block}"}
        else:
            messages.insert(0, {"role": "system", "content": block})

    def before_prompt(self, turn: Any, messages: list[dict[str, str]]) -> None:
        """``ChatService.before_prompt`` hook: with documents too long to show whole, the outgoing question
        (not the stored one) gets their most relevant parts."""
        self.shape(turn, messages)

    def shape(self, turn: Any, messages: list[dict[str, str]]) -> Parts | None:
        """As the hook; returns the passages given (None when the chat's documents are not read in parts)."""
        if not messages or messages[-1].get("role") != "user":
            return None
        if self.approach(int(turn.conversation_id)) != "parts":
            return None
        docs = self.attached(int(turn.conversation_id))
        parts = [(f"{d.name}, {ref}" if len(docs) > 1 else ref, text) for d in docs for ref, text in d.parts]
        used = sum(self.count(m["content"]) for m in messages)
        budget = max(0, self.n_ctx() // 2 - used)
        given = given_parts(Attachment("chunks", "", "", parts), messages[-1]["content"], self.count, budget)
        messages[-1] = {"role": "user", "content": with_parts(messages[-1]["content"], given)}
        return given


# ----- carried by a conversation export (hisho.core.documents.exchange, format version 2) -----------------------

def exported(db: Any, conversation_id: int) -> list[dict[str, Any]]:
    """The chat's attached documents as plain data: what was read from each file, not the file. [] when it has
    none, or when this database never held any (the documents component is older than the table)."""
    if db.version(COMPONENT) < 3:
        return []
    rows = db.query("SELECT name, sha256, tokens, parts, added FROM chat_documents WHERE conversation_id=? "
                    "ORDER BY id", [conversation_id])
    return [{"name": str(r["name"]), "sha256": str(r["sha256"]), "tokens": int(r["tokens"]),
             "added": float(r["added"]), "parts": [list(p) for p in json.loads(r["parts"])]} for r in rows]


def checked(items: Any) -> list[dict[str, Any]]:
    """Exported documents as read from a file, checked (``DocumentError``, one line naming the entry, when not
    as ``exported`` writes them)."""
    if not isinstance(items, list):
        raise DocumentError("the export's documents are not a list")
    out: list[dict[str, Any]] = []
    for i, d in enumerate(items, 1):
        parts = d.get("parts") if isinstance(d, dict) else None
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"].strip() or \
                not isinstance(parts, list) or \
                not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in parts):
            raise DocumentError(f"attached document {i} of the export is malformed (needs a name and its parts)")
        chars = sum(len(t) for _, t in parts)
        if chars > MAX_CHARS:
            raise DocumentError(f"attached document {i} of the export ({d['name']}) is too long ({chars:,} "
                                f"characters; the limit is {MAX_CHARS:,})")
        tokens = d.get("tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            tokens = chars // CHARS_PER_TOKEN  # the count is only used to choose whole or parts
        text = "\n\n".join(t for _, t in parts)
        sha = d.get("sha256") if isinstance(d.get("sha256"), str) else ""
        sha = sha or hashlib.sha256(text.encode("utf-8")).hexdigest()
        if any(o["sha256"] == sha for o in out):
            continue  # the same file twice is kept once, as when attaching
        out.append({"name": d["name"].strip(), "sha256": sha,
                    "tokens": tokens, "parts": parts,
                    "added": float(d["added"]) if isinstance(d.get("added"), int | float) else time.time()})
    return out


def prepare(db: Any) -> None:
    """Make sure the table exists (the documents component's steps); before a transaction that restores."""
    db.migrate(COMPONENT, STEPS)


def restore(db: Any, conversation_id: int, items: list[dict[str, Any]]) -> None:
    """Attach ``checked`` documents to a chat (inside the caller's transaction; ``prepare`` first)."""
    for d in items:
        db.execute("INSERT INTO chat_documents (conversation_id, name, sha256, tokens, parts, added) "
                   "VALUES (?,?,?,?,?,?)", [conversation_id, d["name"], d["sha256"], d["tokens"],
                                            json.dumps(d["parts"]), d["added"]])
