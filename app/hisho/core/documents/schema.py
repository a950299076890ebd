"""The documents component's tables (SQLite through ``core.db``, component "documents"), in one place.

Every module of the package that reads or writes these tables (the summary cache, the question's parts, the
chat's attached documents) migrates through ``STEPS`` here, so none of them imports another for its schema.
A new table or column is a new step appended to ``STEPS``, never an edit of an old one.
"""

from __future__ import annotations

import sqlite3

COMPONENT = "documents"


def _v1_summaries(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE doc_summaries (
        doc_sha TEXT NOT NULL, level INTEGER NOT NULL, chunk_key TEXT NOT NULL, model_fp TEXT NOT NULL,
        prompt_version TEXT NOT NULL, chunk_index INTEGER NOT NULL, refs TEXT NOT NULL, summary TEXT NOT NULL,
        completion_tokens INTEGER NOT NULL, created REAL NOT NULL,
        PRIMARY KEY (doc_sha, level, chunk_key, model_fp, prompt_version))""")
    db.execute("""CREATE TABLE doc_speeds (
        model_fp TEXT PRIMARY KEY, prefill_tps REAL NOT NULL, decode_tps REAL NOT NULL,
        batch_gain REAL NOT NULL, updated REAL NOT NULL)""")


def _v2_attachments(db: sqlite3.Connection) -> None:
    """The parts of a long document chosen for a chat's question (hisho.core.documents.ask)."""
    db.execute("""CREATE TABLE doc_attachments (
        conversation_id INTEGER PRIMARY KEY, approach TEXT NOT NULL, note TEXT NOT NULL, parts TEXT NOT NULL,
        doc_shas TEXT NOT NULL)""")


def _v3_chat_documents(db: sqlite3.Connection) -> None:
    """Documents attached to a chat whole (hisho.core.documents.attached)."""
    db.execute("""CREATE TABLE chat_documents (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL, sha256 TEXT NOT NULL, tokens INTEGER NOT NULL, parts TEXT NOT NULL,
        added REAL NOT NULL)""")
    db.execute("CREATE INDEX chat_documents_conversation ON chat_documents(conversation_id)")


STEPS = [_v1_summaries, _v2_attachments, _v3_chat_documents]
