"""The conversation store's records and schema: ``Conversation``, ``Message``, ``ChatSettings``, the status
values, and the versioned migration steps of component ``conversations`` (``hisho.core.db``). No Qt.

Rules of use: ``hisho.core.conversations.store`` re-exports every name here; import from there. A schema change is a
new step appended to ``STEPS``, and a new message column is also added to ``Message`` and ``META``. An old step
is never changed in what it makes: a database made by the steps as first released and one made now have the same
tables, columns, keys, indexes and search (tests/core/test_schema_history.py).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils  # a step's argument; hisho.core.db imports it only when a step or upsert runs


log = logging.getLogger("hisho.store")

COMPONENT = "conversations"

# Message status values.
DONE, STREAMING, STOPPED, FAILED, INTERRUPTED = "done", "streaming", "stopped", "error", "interrupted"
STOPPED_AT_CLOSE = "stopped when Hisho closed"   # a reply a quit ended: stopped, never "the engine crashed"
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
    # A reasoning model's thinking, where its template lets it be chosen: on/off (Qwen3's ``enable_thinking``)
    # and the effort (GPT-OSS: low, medium, high). Ignored by models that cannot change it.
    thinking: bool = True
    reasoning_effort: str = "medium"

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
    reasoning: str = ""         # a reasoning model's thinking, apart from the answer in ``content``
    reasoning_s: float | None = None  # how long it thought: first token to the answer's first token
    tool_calls: str = ""        # JSON: the tool calls a reply made and their results (hisho.core.conversations.tool_rounds)
    images: str = ""            # JSON: the names of a user message's images in the data folder (conversations.images)

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


def _v1_tables(db: sqlite_utils.Database) -> None:
    from sqlite_utils.db import ForeignKey

    db.table("conversations").create(
        {"id": int, "title": str, "model": str, "system_prompt": str, "settings": str, "created_at": float,
         "updated_at": float, "pinned": int, "leaf_id": int}, pk="id",
        not_null={"title", "model", "system_prompt", "settings", "created_at", "updated_at", "pinned"},
        defaults={"title": "", "model": "", "system_prompt": "", "settings": "{}", "pinned": 0})
    db.table("messages").create(
        {"id": int, "conversation_id": int, "parent_id": int, "role": str, "content": str, "created_at": float,
         "status": str, "tokens": int, "prompt_tokens": int, "ttft_s": float, "tokens_per_s": float,
         "model": str, "error": str}, pk="id",
        not_null={"conversation_id", "role", "content", "created_at", "status", "model", "error"},
        defaults={"content": "", "status": "done", "model": "", "error": ""},
        foreign_keys=[ForeignKey("messages", "conversation_id", "conversations", "id", on_delete="CASCADE"),
                      ForeignKey("messages", "parent_id", "messages", "id", on_delete="CASCADE")])
    db.table("messages").create_index(["conversation_id"], index_name="messages_conversation")
    db.table("messages").create_index(["parent_id"], index_name="messages_parent")


def _v2_fts(db: sqlite_utils.Database) -> None:
    # External-content FTS over messages.content, kept in step by triggers, filled from the existing rows.
    db.table("messages").enable_fts(["content"], create_triggers=True)


def _v3_drafts_and_trash(db: sqlite_utils.Database) -> None:
    db.table("conversations").add_column("draft", str, not_null_default="")
    db.table("conversations").add_column("deleted_at", float)


def _v4_message_engine(db: sqlite_utils.Database) -> None:
    # Which engine answered each message ("local" or a remote engine's name; '' before this step).
    db.table("messages").add_column("engine", str, not_null_default="")


def _v5_message_reasoning(db: sqlite_utils.Database) -> None:
    # A reasoning model's thinking, kept apart from the answer (not searched: the answer is what was said).
    db.table("messages").add_column("reasoning", str, not_null_default="")
    db.table("messages").add_column("reasoning_s", float)


def _v6_message_tool_calls(db: sqlite_utils.Database) -> None:
    # The tool calls a reply made, each with its arguments, the person's approval and the result (JSON).
    db.table("messages").add_column("tool_calls", str, not_null_default="")


def _v7_message_images(db: sqlite_utils.Database) -> None:
    # The images a user message carried: a JSON list of file names in the data folder's images/ (checked PNGs).
    db.table("messages").add_column("images", str, not_null_default="")


STEPS = (_v1_tables, _v2_fts, _v3_drafts_and_trash, _v4_message_engine, _v5_message_reasoning,
         _v6_message_tool_calls, _v7_message_images)


def _fts_query(text: str) -> str:
    """User words -> an FTS5 query that cannot be a syntax error: each word quoted, the last one a prefix."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        return ""
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


META = ("tokens", "prompt_tokens", "ttft_s", "tokens_per_s", "model", "error", "engine", "reasoning", "reasoning_s",
        "tool_calls", "images")


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
