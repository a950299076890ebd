"""The schema steps as first released, in the plain SQL they were written in, for every component whose steps
are now written with sqlite-utils. A database made by these is what users have on disk: the current steps must
make the same tables, columns, keys, indexes and search, and the current code must open these databases."""

from __future__ import annotations

from typing import Any


def _sql(*statements: str) -> Any:
    def step(db: Any) -> None:
        for sql in statements:
            db.execute(sql)
    return step


CONVERSATIONS = [
    _sql("""CREATE TABLE conversations (
        id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL, updated_at REAL NOT NULL, pinned INTEGER NOT NULL DEFAULT 0,
        leaf_id INTEGER)""",
         """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL,
        status TEXT NOT NULL DEFAULT 'done', tokens INTEGER, prompt_tokens INTEGER, ttft_s REAL,
        tokens_per_s REAL, model TEXT NOT NULL DEFAULT '', error TEXT NOT NULL DEFAULT '')""",
         "CREATE INDEX messages_conversation ON messages(conversation_id)",
         "CREATE INDEX messages_parent ON messages(parent_id)"),
    _sql("CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id')",
         """CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
         """CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content); END""",
         """CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
         "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')"),
    _sql("ALTER TABLE conversations ADD COLUMN draft TEXT NOT NULL DEFAULT ''",
         "ALTER TABLE conversations ADD COLUMN deleted_at REAL"),
    _sql("ALTER TABLE messages ADD COLUMN engine TEXT NOT NULL DEFAULT ''"),
]

KV = [
    _sql("""CREATE TABLE kv_chunks (
        key TEXT PRIMARY KEY, parent TEXT NOT NULL, fingerprint TEXT NOT NULL, start INTEGER NOT NULL,
        n_tokens INTEGER NOT NULL, tokens BLOB NOT NULL, path TEXT NOT NULL, bytes INTEGER NOT NULL,
        created REAL NOT NULL, last_used REAL NOT NULL)""",
         "CREATE INDEX kv_chunks_parent ON kv_chunks(parent)",
         """CREATE TABLE kv_entries (
        owner TEXT NOT NULL, fingerprint TEXT NOT NULL, tip TEXT NOT NULL, n_tokens INTEGER NOT NULL,
        pinned INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL, last_used REAL NOT NULL,
        PRIMARY KEY (owner, fingerprint))""",
         """CREATE TABLE kv_speed (
        fingerprint TEXT PRIMARY KEY, prefill_tok_s REAL, restore_bytes_s REAL, updated REAL NOT NULL)"""),
    _sql("""CREATE TABLE kv_models (
        fingerprint TEXT PRIMARY KEY, xxh3_128 TEXT NOT NULL, size INTEGER NOT NULL, path TEXT NOT NULL,
        updated REAL NOT NULL)""",
         "CREATE INDEX kv_models_identity ON kv_models(xxh3_128, size)"),
]

DOCUMENTS = [
    _sql("""CREATE TABLE doc_summaries (
        doc_sha TEXT NOT NULL, level INTEGER NOT NULL, chunk_key TEXT NOT NULL, model_fp TEXT NOT NULL,
        prompt_version TEXT NOT NULL, chunk_index INTEGER NOT NULL, refs TEXT NOT NULL, summary TEXT NOT NULL,
        completion_tokens INTEGER NOT NULL, created REAL NOT NULL,
        PRIMARY KEY (doc_sha, level, chunk_key, model_fp, prompt_version))""",
         """CREATE TABLE doc_speeds (
        model_fp TEXT PRIMARY KEY, prefill_tps REAL NOT NULL, decode_tps REAL NOT NULL,
        batch_gain REAL NOT NULL, updated REAL NOT NULL)"""),
    _sql("""CREATE TABLE doc_attachments (
        conversation_id INTEGER PRIMARY KEY, approach TEXT NOT NULL, note TEXT NOT NULL, parts TEXT NOT NULL,
        doc_shas TEXT NOT NULL)"""),
    _sql("""CREATE TABLE chat_documents (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL, sha256 TEXT NOT NULL, tokens INTEGER NOT NULL, parts TEXT NOT NULL,
        added REAL NOT NULL)""",
         "CREATE INDEX chat_documents_conversation ON chat_documents(conversation_id)"),
]

MODELS = [
    _sql("""CREATE TABLE models (
        name TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL, source TEXT NOT NULL,
        owned INTEGER NOT NULL DEFAULT 0, arch TEXT NOT NULL DEFAULT '', quant TEXT NOT NULL DEFAULT '',
        n_ctx_train INTEGER NOT NULL DEFAULT 0, sha256 TEXT NOT NULL DEFAULT '',
        revision TEXT NOT NULL DEFAULT '', parts TEXT NOT NULL DEFAULT '[]', added REAL NOT NULL DEFAULT 0)"""),
    _sql(),                                  # the JSON registry's import: no schema
]

DOWNLOADS = [
    _sql("""CREATE TABLE downloads (
        id INTEGER PRIMARY KEY, repo TEXT NOT NULL, name TEXT NOT NULL, quant TEXT NOT NULL DEFAULT '',
        parts TEXT NOT NULL, sha256 TEXT NOT NULL, part_sizes TEXT NOT NULL, size INTEGER NOT NULL,
        revision TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, done_bytes INTEGER NOT NULL DEFAULT 0,
        error TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
        updated REAL NOT NULL)"""),
]
