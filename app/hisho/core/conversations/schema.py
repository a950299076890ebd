"""The conversation store's records and schema: ``Conversation``, ``Message``, ``ChatSettings``, the status
values, and the versioned migration steps of component ``conversations`` (``hisho.core.db``). No Qt.

Rules of use: ``hisho.core.conversations.store`` re-exports every name here; import from there. A schema change is a
new step appended to ``STEPS`` (never an edit of an old one), and a new message column is also added to
``Message`` and ``META``.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from dataclasses import asdict, dataclass, field, fields
from typing import Any

log = logging.getLogger("hisho.store")

COMPONENT = "conversations"

# Message status values.
DONE, STREAMING, STOPPED, FAILED, INTERRUPTED = "done", "streaming", "stopped", "error", "interrupted"
PARTIAL_STATES = (STOPPED, FAILED, INTERRUPTED)


@dataclass
class ChatSettings:
    """Per-conversation sampling. ``seed`` -1 means random."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    repeat_penalty: float = 1.1
    max_tokens: int = 1024
    seed: int = -1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ChatSettings:
        known = {f.name: f.type for f in fields(cls)}
        out = cls()
        for key, value in (data or {}).items():
            if key in known:
                try:
                    setattr(out, key, type(getattr(out, key))(value))
                except (TypeError, ValueError):
                    log.warning("ignoring bad chat setting %s=%r", key, value)
        return out


@dataclass
class Conversation:
    id: int
    title: str
    model: str = ""
    system_prompt: str = ""
    settings: ChatSettings = field(default_factory=ChatSettings)
    created_at: float = 0.0
    updated_at: float = 0.0
    pinned: bool = False
    leaf_id: int | None = None
    draft: str = ""
    deleted_at: float | None = None


@dataclass
class Message:
    id: int
    conversation_id: int
    parent_id: int | None
    role: str
    content: str
    created_at: float = 0.0
    status: str = DONE
    tokens: int | None = None
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    model: str = ""
    error: str = ""
    engine: str = ""            # "local" or the remote engine's name (Settings → Engines)

    @property
    def partial(self) -> bool:
        return self.status in PARTIAL_STATES


@dataclass
class SearchHit:
    conversation_id: int
    message_id: int | None
    title: str
    snippet: str


_SUBTREE = """WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL SELECT m.id FROM messages m JOIN sub
               ON m.parent_id = sub.id) SELECT id FROM sub"""


@dataclass
class DeletedMessages:
    """What ``take_messages`` removed: enough for ``put_back`` to restore it exactly."""

    conversation_id: int
    rows: list[dict[str, Any]]
    leaf_id: int | None

    @property
    def count(self) -> int:
        return len(self.rows)


# ----- schema ----------------------------------------------------------------------------------------------


def _v1_tables(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE conversations (
        id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL, updated_at REAL NOT NULL, pinned INTEGER NOT NULL DEFAULT 0,
        leaf_id INTEGER)""")
    db.execute("""CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL,
        status TEXT NOT NULL DEFAULT 'done', tokens INTEGER, prompt_tokens INTEGER, ttft_s REAL,
        tokens_per_s REAL, model TEXT NOT NULL DEFAULT '', error TEXT NOT NULL DEFAULT '')""")
    db.execute("CREATE INDEX messages_conversation ON messages(conversation_id)")
    db.execute("CREATE INDEX messages_parent ON messages(parent_id)")


def _v2_fts(db: sqlite3.Connection) -> None:
    # External-content FTS over messages.content, kept in step by triggers; filled from existing rows.
    db.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id')")
    db.execute("""CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""")
    db.execute("""CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content); END""")
    db.execute("""CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""")
    db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")


def _v3_drafts_and_trash(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE conversations ADD COLUMN draft TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE conversations ADD COLUMN deleted_at REAL")


def _v4_message_engine(db: sqlite3.Connection) -> None:
    # Which engine answered each message ("local" or a remote engine's name; '' before this step).
    db.execute("ALTER TABLE messages ADD COLUMN engine TEXT NOT NULL DEFAULT ''")


STEPS = (_v1_tables, _v2_fts, _v3_drafts_and_trash, _v4_message_engine)


def _fts_query(text: str) -> str:
    """User words -> an FTS5 query that cannot be a syntax error: each word quoted, the last one a prefix."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        return ""
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


META = ("tokens", "prompt_tokens", "ttft_s", "tokens_per_s", "model", "error", "engine")


def meta_fields(values: dict[str, Any]) -> dict[str, Any]:
    bad = set(values) - set(META)
    if bad:
        raise ValueError(f"unknown message fields {', '.join(sorted(bad))}")
    return dict(values)


def conversation_from_row(row: Any) -> Conversation:  # Database.query rows are dicts
    try:
        settings = ChatSettings.from_dict(json.loads(row.get("settings") or "{}"))
    except ValueError:
        settings = ChatSettings()
    return Conversation(
        id=int(row["id"]), title=row["title"], model=row["model"], system_prompt=row["system_prompt"],
        settings=settings, created_at=row["created_at"], updated_at=row["updated_at"],
        pinned=bool(row["pinned"]), leaf_id=row["leaf_id"], draft=row.get("draft") or "",
        deleted_at=row.get("deleted_at"))


def message_from_row(row: Any) -> Message:
    return Message(**{f.name: row[f.name] for f in fields(Message) if f.name in row})
