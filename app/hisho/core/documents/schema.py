"""The documents component's tables (SQLite through ``core.db``, component "documents"), in one place.

Every module of the package that reads or writes these tables (the summary cache, the question's parts, the
chat's attached documents) migrates through ``STEPS`` here, so none of them imports another for its schema.
A new table or column is a new step appended to ``STEPS``, never an edit of an old one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils  # a step's argument; hisho.core.db imports it only when a step or upsert runs

COMPONENT = "documents"

SUMMARY_KEY = ("doc_sha", "level", "chunk_key", "model_fp", "prompt_version")


def _v1_summaries(db: sqlite_utils.Database) -> None:
    columns = {"doc_sha": str, "level": int, "chunk_key": str, "model_fp": str, "prompt_version": str,
               "chunk_index": int, "refs": str, "summary": str, "completion_tokens": int, "created": float}
    db.table("doc_summaries").create(columns, pk=SUMMARY_KEY, not_null=set(columns))
    speeds = {"model_fp": str, "prefill_tps": float, "decode_tps": float, "batch_gain": float, "updated": float}
    db.table("doc_speeds").create(speeds, pk="model_fp", not_null=set(speeds) - {"model_fp"})


def _v2_attachments(db: sqlite_utils.Database) -> None:
    """The parts of a long document chosen for a chat's question (hisho.core.documents.ask)."""
    db.table("doc_attachments").create(
        {"conversation_id": int, "approach": str, "note": str, "parts": str, "doc_shas": str},
        pk="conversation_id", not_null={"approach", "note", "parts", "doc_shas"})


def _v3_chat_documents(db: sqlite_utils.Database) -> None:
    """Documents attached to a chat whole (hisho.core.documents.attached)."""
    # Plain SQL: the rows point at the conversations component's table, which sqlite-utils would insist exists
    # already; the components migrate in any order and SQLite resolves the reference when it is used.
    db.execute("""CREATE TABLE chat_documents (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL, sha256 TEXT NOT NULL, tokens INTEGER NOT NULL, parts TEXT NOT NULL,
        added REAL NOT NULL)""")
    db.table("chat_documents").create_index(["conversation_id"], index_name="chat_documents_conversation")


def _v4_given(db: sqlite_utils.Database) -> None:
    """The passages each question about a long document was given: its answer's sources
    (hisho.core.documents.ask.record_given)."""
    db.execute("""CREATE TABLE doc_given (
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        question TEXT NOT NULL, parts TEXT NOT NULL, created REAL NOT NULL,
        PRIMARY KEY (conversation_id, question))""")


STEPS = [_v1_summaries, _v2_attachments, _v3_chat_documents, _v4_given]
