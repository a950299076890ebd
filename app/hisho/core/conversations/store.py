"""The conversation store: conversations and their messages in the app's SQLite database (component
``conversations`` of ``hisho.core.db.Database``).

Rules of use:
- Messages form a tree: each has a ``parent_id`` (None for the first). Regenerating a reply or editing a user
  message adds a *sibling*; nothing is overwritten, so every old branch stays reachable. A conversation's
  ``leaf_id`` names the tip of the branch on screen; ``branch()`` walks from it to the root.
- Text in SQLite is the source of truth. A reply being streamed is saved as it grows (status ``streaming``);
  a store opened after a crash marks such rows ``interrupted``, so a partial reply is never lost or mistaken
  for a finished one.
- Deleting a conversation is soft (``deleted_at``) so the window can offer Undo; ``purge_deleted()`` removes
  the rows for good.
- Search uses an FTS5 index over message text kept in step by triggers; user input is quoted word by word so
  no query can be a syntax error.
- Any thread may call in (the Database serialises on its lock); the GUI calls from its store worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from hisho.core.conversations.schema import (
    _SUBTREE,
    COMPONENT,
    DONE,
    FAILED,
    INTERRUPTED,
    PARTIAL_STATES,
    STEPS,
    STOPPED,
    STREAMING,
    ChatSettings,
    Conversation,
    DeletedMessages,
    Message,
    SearchHit,
    _fts_query,
)
from hisho.core.conversations.schema import conversation_from_row as _conversation
from hisho.core.conversations.schema import message_from_row as _message
from hisho.core.conversations.schema import meta_fields as _meta
from hisho.core.db import Database, DatabaseUnavailable

log = logging.getLogger("hisho.store")

__all__ = ["COMPONENT", "DONE", "FAILED", "INTERRUPTED", "PARTIAL_STATES", "STEPS", "STOPPED", "STREAMING",
           "ChatSettings", "Conversation", "ConversationStore", "DeletedMessages", "Message", "SearchHit"]

# ----- the store -------------------------------------------------------------------------------------------


class ConversationStore:
    """Conversations and message trees on one ``Database``. ``read_only`` stores refuse writes with
    ``DatabaseUnavailable``."""

    def __init__(self, db: Database | None = None) -> None:
        self.db = db or Database()
        self.db.migrate(COMPONENT, STEPS)
        self.read_only = self.db.read_only
        if not self.read_only:
            self.db.execute("UPDATE messages SET status = ? WHERE status = ?", [INTERRUPTED, STREAMING])

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def tx(self) -> Iterator[None]:
        """A transaction, joined if this thread already has one open (so callers can group several writes)."""
        with self.db._lock:  # held by whoever has a transaction open, so in_transaction is ours to read
            if self.db.conn.in_transaction:
                yield
            else:
                with self.db.transaction():
                    yield

    def _writable(self) -> None:
        if self.read_only:
            raise DatabaseUnavailable("the conversation database is open read-only; changes are not saved")

    # ----- conversations --------------------------------------------------------------------------------

    def create(self, title: str = "New chat", *, model: str = "", system_prompt: str = "",
               settings: ChatSettings | None = None) -> Conversation:
        self._writable()
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations (title, model, system_prompt, settings, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [title, model, system_prompt, json.dumps((settings or ChatSettings()).to_dict()), now, now])
        return self.get(int(cur.lastrowid or 0))

    def get(self, conversation_id: int) -> Conversation:
        rows = self.db.query("SELECT * FROM conversations WHERE id = ?", [conversation_id])
        if not rows:
            raise KeyError(f"no conversation {conversation_id}")
        return _conversation(rows[0])

    def conversations(self, *, include_deleted: bool = False) -> list[Conversation]:
        """Pinned first, then most recently updated."""
        where = "" if include_deleted else "WHERE deleted_at IS NULL"
        rows = self.db.query(f"SELECT * FROM conversations {where} ORDER BY pinned DESC, updated_at DESC, id DESC")
        return [_conversation(r) for r in rows]

    def update(self, conversation_id: int, **changes: Any) -> Conversation:
        """Change any of title, model, system_prompt, settings (ChatSettings), pinned, draft, leaf_id."""
        self._writable()
        allowed = {"title", "model", "system_prompt", "settings", "pinned", "draft", "leaf_id"}
        bad = set(changes) - allowed
        if bad:
            raise ValueError(f"cannot update {', '.join(sorted(bad))}")
        if isinstance(changes.get("settings"), ChatSettings):
            changes["settings"] = json.dumps(changes["settings"].to_dict())
        if "pinned" in changes:
            changes["pinned"] = int(bool(changes["pinned"]))
        if changes:
            touch = {"draft"} != set(changes)  # typing a draft does not reorder the sidebar
            sets = ", ".join(f"{k} = ?" for k in changes) + (", updated_at = ?" if touch else "")
            values = list(changes.values()) + ([time.time()] if touch else [])
            self.db.execute(f"UPDATE conversations SET {sets} WHERE id = ?", [*values, conversation_id])
        return self.get(conversation_id)

    def delete(self, conversation_id: int) -> None:
        """Soft delete: hidden from conversations() and search() until restore() or purge_deleted()."""
        self._writable()
        self.db.execute("UPDATE conversations SET deleted_at = ? WHERE id = ?", [time.time(), conversation_id])

    def restore(self, conversation_id: int) -> None:
        self._writable()
        self.db.execute("UPDATE conversations SET deleted_at = NULL WHERE id = ?", [conversation_id])

    def purge_deleted(self, older_than_s: float = 0.0) -> int:
        self._writable()
        cutoff = time.time() - older_than_s
        with self.db.transaction():
            ids = [r["id"] for r in self.db.query(
                "SELECT id FROM conversations WHERE deleted_at IS NOT NULL AND deleted_at <= ?", [cutoff])]
            for cid in ids:
                self.db.execute("UPDATE conversations SET leaf_id = NULL WHERE id = ?", [cid])
                self.db.execute("DELETE FROM messages WHERE conversation_id = ?", [cid])
                self.db.execute("DELETE FROM conversations WHERE id = ?", [cid])
        return len(ids)

    # ----- messages -------------------------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, content: str, *, parent_id: int | None = None,
                    status: str = DONE, make_leaf: bool = True, **meta: Any) -> Message:
        """Append a message under ``parent_id`` (None: a root). ``meta``: tokens, prompt_tokens, ttft_s,
        tokens_per_s, model, engine, error, created_at."""
        self._writable()
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"unknown role {role!r}")
        row = {"conversation_id": conversation_id, "parent_id": parent_id, "role": role, "content": content,
               "status": status, "created_at": meta.pop("created_at", None) or time.time()}
        row.update(_meta(meta))
        cols = ", ".join(row)
        with self.tx():
            cur = self.db.execute(f"INSERT INTO messages ({cols}) VALUES ({', '.join('?' * len(row))})",
                                  list(row.values()))
            mid = int(cur.lastrowid or 0)
            leaf = ", leaf_id = ?" if make_leaf else ""
            self.db.execute(f"UPDATE conversations SET updated_at = ?{leaf} WHERE id = ?",
                            [time.time(), *([mid] if make_leaf else []), conversation_id])
        return self.message(mid)

    def update_message(self, message_id: int, **changes: Any) -> None:
        """Change content, status and/or metadata (the streaming path calls this as a reply grows)."""
        self._writable()
        row: dict[str, Any] = {k: changes.pop(k) for k in ("content", "status") if k in changes}
        row.update(_meta(changes))
        if row:
            sets = ", ".join(f"{k} = ?" for k in row)
            self.db.execute(f"UPDATE messages SET {sets} WHERE id = ?", [*row.values(), message_id])

    def message(self, message_id: int) -> Message:
        rows = self.db.query("SELECT * FROM messages WHERE id = ?", [message_id])
        if not rows:
            raise KeyError(f"no message {message_id}")
        return _message(rows[0])

    def messages(self, conversation_id: int) -> list[Message]:
        """Every message of the conversation, all branches, in creation order."""
        rows = self.db.query("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", [conversation_id])
        return [_message(r) for r in rows]

    def branch(self, conversation_id: int, leaf_id: int | None = None) -> list[Message]:
        """The messages from the root to ``leaf_id`` (default: the conversation's current leaf)."""
        if leaf_id is None:
            leaf_id = self.get(conversation_id).leaf_id
        if leaf_id is None:
            return []
        by_id = {m.id: m for m in self.messages(conversation_id)}
        path: list[Message] = []
        node = by_id.get(leaf_id)
        while node is not None:
            path.append(node)
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
        return path[::-1]

    def siblings(self, message_id: int) -> list[int]:
        """Ids of the alternatives of a message (same parent, same role), oldest first, itself included."""
        m = self.message(message_id)
        rows = self.db.query(
            "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? AND role = ? ORDER BY id",
            [m.conversation_id, m.parent_id, m.role])
        return [int(r["id"]) for r in rows]

    def latest_leaf_under(self, message_id: int) -> int:
        """Follow the newest child from ``message_id`` down to a leaf."""
        current = message_id
        while True:
            row = self.db.query_one("SELECT max(id) FROM messages WHERE parent_id = ?", [current])
            if row is None or row[0] is None:
                return current
            current = int(row[0])

    def switch_branch(self, message_id: int) -> Conversation:
        """Show the branch through ``message_id`` (its newest continuation)."""
        m = self.message(message_id)
        return self.update(m.conversation_id, leaf_id=self.latest_leaf_under(message_id))

    def delete_message(self, message_id: int) -> Conversation:
        """Delete a message and everything after it on its branch; the view moves to a remaining branch."""
        self._writable()
        m = self.message(message_id)
        with self.tx():
            conv = self.get(m.conversation_id)
            on_branch = conv.leaf_id is not None and any(
                x.id == message_id for x in self.branch(m.conversation_id, conv.leaf_id))
            self.db.execute("DELETE FROM messages WHERE id = ?", [message_id])  # children cascade
            if on_branch or self.db.query_one("SELECT 1 FROM messages WHERE id = ?", [conv.leaf_id]) is None:
                others = self.siblings_of_parent(m.conversation_id, m.parent_id)
                leaf = self.latest_leaf_under(others[-1]) if others else m.parent_id
                self.db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", [leaf, m.conversation_id])
        return self.get(m.conversation_id)

    def subtree_size(self, message_id: int) -> int:
        """How many messages ``delete_message`` would remove: this one and all under it, every version."""
        row = self.db.query_one(f"SELECT count(*) FROM ({_SUBTREE})", [message_id])
        return int(row[0]) if row else 0

    def take_messages(self, message_id: int) -> DeletedMessages:
        """``delete_message`` that keeps what it removed (the message, everything under it on every branch,
        and the branch that was on screen), so ``put_back`` can undo it."""
        self._writable()
        with self.tx():
            m = self.message(message_id)
            rows = self.db.query(f"SELECT * FROM messages WHERE id IN ({_SUBTREE}) ORDER BY id", [message_id])
            leaf = self.get(m.conversation_id).leaf_id
            self.delete_message(message_id)
        return DeletedMessages(m.conversation_id, [dict(r) for r in rows], leaf)

    def put_back(self, deleted: DeletedMessages) -> Conversation:
        """Undo ``take_messages``: the rows come back under their parent (new ids where an old one has been
        reused meanwhile) and the branch that was on screen is shown again."""
        self._writable()
        new_ids: dict[int, int] = {}
        with self.tx():
            for row in deleted.rows:
                row = dict(row)
                old = int(row["id"])
                row["parent_id"] = new_ids.get(row["parent_id"], row["parent_id"])
                if self.db.query_one("SELECT 1 FROM messages WHERE id = ?", [old]) is not None:
                    del row["id"]
                cols = ", ".join(row)
                cur = self.db.execute(f"INSERT INTO messages ({cols}) VALUES ({', '.join('?' * len(row))})",
                                      list(row.values()))
                new_ids[old] = int(row.get("id") or cur.lastrowid or 0)
            leaf = new_ids.get(deleted.leaf_id, deleted.leaf_id) if deleted.leaf_id is not None else None
            self.db.execute("UPDATE conversations SET leaf_id = ?, updated_at = ? WHERE id = ?",
                            [leaf, time.time(), deleted.conversation_id])
        return self.get(deleted.conversation_id)

    def siblings_of_parent(self, conversation_id: int, parent_id: int | None) -> list[int]:
        rows = self.db.query("SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
                             [conversation_id, parent_id])
        return [int(r["id"]) for r in rows]

    # ----- search ---------------------------------------------------------------------------------------

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title or messages match ``text``; one hit per conversation, best first."""
        query = _fts_query(text)
        if not query:
            return []
        rows = self.db.query(
            """SELECT m.conversation_id AS cid, m.id AS mid, c.title AS title,
                      snippet(messages_fts, 0, '[', ']', '…', 12) AS snip, bm25(messages_fts) AS rank
               FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
               JOIN conversations c ON c.id = m.conversation_id
               WHERE messages_fts MATCH ? AND c.deleted_at IS NULL ORDER BY rank LIMIT ?""",
            [query, limit * 4])
        hits: dict[int, SearchHit] = {}
        like = "%" + text.strip().replace("%", "").replace("_", "") + "%"
        for r in self.db.query("SELECT id, title FROM conversations WHERE deleted_at IS NULL AND title LIKE ? "
                               "ORDER BY updated_at DESC LIMIT ?", [like, limit]):
            hits[int(r["id"])] = SearchHit(int(r["id"]), None, r["title"], "")
        for r in rows:
            cid = int(r["cid"])
            if cid not in hits or hits[cid].message_id is None:
                hits[cid] = SearchHit(cid, int(r["mid"]), r["title"], r["snip"])
        return list(hits.values())[:limit]
