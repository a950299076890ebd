"""The resumable store of finished summaries (SQLite through ``core.db``, component "documents").

Every chunk summary and every combine step is written the moment it finishes, keyed by
(document hash, level, chunk key, model fingerprint, prompt version). The chunk key hashes the chunk's text and
references, so a different chunking (another context size) never reuses a summary of different text. A job that
is killed halfway and started again finds these rows and generates only what is missing.

Also kept per model: the last measured prefill and decode speeds, for the ETA of the next job.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from hisho.core.db import Database
from hisho.core.models import identity as model_identity

log = logging.getLogger("hisho.documents")

COMPONENT = "documents"


def _v1(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE doc_summaries (
        doc_sha TEXT NOT NULL, level INTEGER NOT NULL, chunk_key TEXT NOT NULL, model_fp TEXT NOT NULL,
        prompt_version TEXT NOT NULL, chunk_index INTEGER NOT NULL, refs TEXT NOT NULL, summary TEXT NOT NULL,
        completion_tokens INTEGER NOT NULL, created REAL NOT NULL,
        PRIMARY KEY (doc_sha, level, chunk_key, model_fp, prompt_version))""")
    db.execute("""CREATE TABLE doc_speeds (
        model_fp TEXT PRIMARY KEY, prefill_tps REAL NOT NULL, decode_tps REAL NOT NULL,
        batch_gain REAL NOT NULL, updated REAL NOT NULL)""")


def _v2(db: sqlite3.Connection) -> None:
    from hisho.core.documents.ask import migrate_v2

    migrate_v2(db)


def _v3(db: sqlite3.Connection) -> None:
    from hisho.core.documents.attached import migrate_v3

    migrate_v3(db)


STEPS = [_v1, _v2, _v3]


def model_fingerprint(model_path: str | Path) -> str:
    """The model file's identity (hisho.core.models.identity: every byte, cached per file version): a model
    changed in place (a re-download, a fixed quant) never reuses the old weights' summaries. The hash of the
    first MiB used before missed changes past the header; summaries cached under it are simply not found again."""
    try:
        return str(model_identity.identity(model_path)["xxh3_128"])[:24]
    except OSError as exc:
        log.warning("cannot read %s for its identity (%s); summaries are cached under its name", model_path, exc)
        return "name-" + hashlib.sha256(Path(model_path).name.encode("utf-8")).hexdigest()[:19]


@dataclass(frozen=True)
class Key:
    doc_sha: str
    level: int
    chunk_key: str
    model_fp: str
    prompt_version: str


class SummaryCache:
    """Thread-safe (``Database`` serializes access). ``db`` defaults to the app database."""

    def __init__(self, db: Database | None = None) -> None:
        self.db = db or Database()
        self.db.migrate(COMPONENT, STEPS)

    def get(self, key: Key) -> str | None:
        row = self.db.query_one(
            "SELECT summary FROM doc_summaries WHERE doc_sha=? AND level=? AND chunk_key=? AND model_fp=? "
            "AND prompt_version=?", [key.doc_sha, key.level, key.chunk_key, key.model_fp, key.prompt_version])
        return str(row[0]) if row else None

    def put(self, key: Key, chunk_index: int, refs: str, summary: str, completion_tokens: int) -> None:
        with self.db.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO doc_summaries VALUES (?,?,?,?,?,?,?,?,?,?)",
                [key.doc_sha, key.level, key.chunk_key, key.model_fp, key.prompt_version, chunk_index, refs,
                 summary, completion_tokens, time.time()])

    def count(self, doc_sha: str, level: int | None = None) -> int:
        sql = "SELECT count(*) FROM doc_summaries WHERE doc_sha=?"
        params: list[object] = [doc_sha]
        if level is not None:
            sql += " AND level=?"
            params.append(level)
        row = self.db.query_one(sql, params)
        return int(row[0]) if row else 0

    def rows(self, doc_sha: str) -> list[dict[str, object]]:
        return [dict(r) for r in self.db.query(
            "SELECT level, chunk_index, chunk_key, created, summary FROM doc_summaries WHERE doc_sha=? "
            "ORDER BY level, chunk_index", [doc_sha])]

    def speeds(self, model_fp: str) -> tuple[float, float, float] | None:
        row = self.db.query_one("SELECT prefill_tps, decode_tps, batch_gain FROM doc_speeds WHERE model_fp=?",
                                [model_fp])
        return (float(row[0]), float(row[1]), float(row[2])) if row else None

    def put_speeds(self, model_fp: str, prefill_tps: float, decode_tps: float, batch_gain: float) -> None:
        with self.db.transaction():
            self.db.execute("INSERT OR REPLACE INTO doc_speeds VALUES (?,?,?,?,?)",
                            [model_fp, prefill_tps, decode_tps, batch_gain, time.time()])
