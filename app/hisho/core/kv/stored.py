"""What the KV store holds, named for people: each owner with its conversation title or document name and
its usage (``KVIndex.usage_all``). No Qt; the settings page and the sidebar show these.

Rules of use: any thread (one SQL query for the usage, one for titles, one for document names); run it off the
GUI thread. Owners whose conversation is gone (deleted in another window, a crash before the KV delete) are
listed as such so the user can still remove them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from hisho.core.db import Database, DatabaseUnavailable
from hisho.core.kv.index import KVIndex
from hisho.core.kv.usage import DOCUMENT_PREFIX, Usage, protected

log = logging.getLogger("hisho.kv")

CONVERSATION_PREFIX = "conv:"  # hisho.core.kv.session.conversation_owner
API_PREFIX = "api:"  # hisho.api.cache: one prompt an API client sent


@dataclass
class StoredItem:
    owner: str
    kind: str                     # "chat", "document", "api" or "other"
    name: str
    conversation_id: int | None   # the chat (for a document: the chat its summary opened as, if any)
    usage: Usage

    @property
    def kept(self) -> bool:
        """Evicted last: a pinned chat or a document."""
        return protected(self.owner, self.usage.pinned)


@dataclass
class StoreReport:
    items: list[StoredItem]       # most recently used first
    total_bytes: int              # on disk, each shared chunk once
    budget_bytes: int

    def counts(self) -> str:
        """What the store holds by kind, for the settings page's summary line: "3 chats, 1 document, 2 API
        prompts" (API prompts and other owners only when there are some)."""
        n = {kind: sum(1 for i in self.items if i.kind == kind) for kind in ("chat", "document", "api", "other")}
        parts = [_plural(n["chat"], "chat"), _plural(n["document"], "document")]
        if n["api"]:
            parts.append(_plural(n["api"], "API prompt"))
        if n["other"]:
            parts.append(f"{n['other']} other")
        return ", ".join(parts)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def conversation_usage(index: KVIndex) -> dict[int, Usage]:
    """Usage per conversation id, for the sidebar (one query whatever the number of chats)."""
    out: dict[int, Usage] = {}
    for owner, usage in index.usage_all().items():
        cid = _conversation_id(owner)
        if cid is not None:
            out[cid] = usage
    return out


def list_stored(index: KVIndex, budget_bytes: int, db: Database | None = None) -> StoreReport:
    """Everything stored, with names from the conversations and document tables of ``db`` (default: the
    index's database). Missing tables (a store without documents yet) just give plainer names."""
    db = db or index.db
    titles = _titles(db)
    docs = _document_chats(db)
    items: list[StoredItem] = []
    for owner, usage in index.usage_all().items():
        cid = _conversation_id(owner)
        if cid is not None:
            name = titles.get(cid, f"Deleted chat #{cid}") or "Untitled"
            items.append(StoredItem(owner, "chat", name, cid, usage))
        elif owner.startswith(DOCUMENT_PREFIX):
            sha = owner[len(DOCUMENT_PREFIX):]
            chat = docs.get(sha)
            name = titles.get(chat, "") if chat is not None else ""
            name = name.removeprefix("Summary: ") if name else f"Document {sha[:12]}"
            items.append(StoredItem(owner, "document", name, chat, usage))
        elif owner.startswith(API_PREFIX):
            items.append(StoredItem(owner, "api", f"API prompt ({usage.n_tokens:,} tokens)", None, usage))
        else:
            items.append(StoredItem(owner, "other", owner, None, usage))
    items.sort(key=lambda i: i.usage.last_used, reverse=True)
    return StoreReport(items, index.total_bytes(), budget_bytes)


def _conversation_id(owner: str) -> int | None:
    if not owner.startswith(CONVERSATION_PREFIX):
        return None
    try:
        return int(owner[len(CONVERSATION_PREFIX):])
    except ValueError:
        return None


def _has_table(db: Database, name: str) -> bool:
    try:
        return db.query_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [name]) is not None
    except DatabaseUnavailable as exc:
        log.info("KV list without names: %s", exc)
        return False


def _titles(db: Database) -> dict[int, str]:
    if not _has_table(db, "conversations"):
        return {}
    rows = db.query("SELECT id, title FROM conversations WHERE deleted_at IS NULL")
    return {int(r["id"]): str(r["title"]) for r in rows}


def _document_chats(db: Database) -> dict[str, int]:
    """Document sha256 -> the conversation its summary opened as (hisho.core.documents.ask)."""
    if not _has_table(db, "doc_attachments"):
        return {}  # no document was ever summarized in this store
    rows = db.query("SELECT conversation_id, doc_shas FROM doc_attachments")
    out: dict[str, int] = {}
    for r in rows:
        try:
            shas = json.loads(r["doc_shas"])
        except ValueError:
            continue
        for sha in shas if isinstance(shas, list) else []:
            out.setdefault(str(sha), int(r["conversation_id"]))
    return out
