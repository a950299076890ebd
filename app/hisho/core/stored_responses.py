"""Responses the local API keeps for ``previous_response_id`` (OpenAI's Responses API, ``store``): each one's
conversation in the template's message form and the response body the client got, in the app's SQLite database
(component ``api_responses`` of ``hisho.core.db.Database``). No Qt.

Rules of use:
- ``StoredResponses(db)`` on the app's database (``api.launch`` wires it into the API's ``Backend``); ``put`` keeps
  a record (any JSON object) under its response id, ``get`` returns it or None, ``delete`` says whether it was there.
- Bounded: at most ``max_count`` records and ``max_bytes`` of JSON together; each ``put`` evicts the oldest past
  either bound (a record larger than the whole budget is not kept, and evicts nothing). An evicted id is gone as if deleted.
- Any thread may call in (the Database serialises on its lock).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from hisho.core.db import Database

if TYPE_CHECKING:
    import sqlite_utils

log = logging.getLogger("hisho.store")

COMPONENT = "api_responses"
MAX_COUNT = 1000
MAX_BYTES = 64 << 20


def _v1_table(db: sqlite_utils.Database) -> None:
    db.table("api_responses").create({"id": str, "created_at": float, "bytes": int, "data": str}, pk="id",
                                      not_null={"created_at", "bytes", "data"})
    db.table("api_responses").create_index(["created_at"], index_name="api_responses_created")


STEPS = (_v1_table,)


class StoredResponses:
    def __init__(self, db: Database, *, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> None:
        self.db = db
        self.max_count, self.max_bytes = max_count, max_bytes
        db.migrate(COMPONENT, STEPS)

    def put(self, response_id: str, record: dict[str, Any]) -> bool:
        """Keep ``record``; False when it alone is larger than the byte budget (then it is not kept, and nothing
        else is evicted for it)."""
        data = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        size = len(data.encode("utf-8"))
        if size > self.max_bytes:
            log.warning("API response %s not kept: %d bytes, over the store's %d", response_id, size, self.max_bytes)
            return False
        with self.db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO api_responses (id, created_at, bytes, data) VALUES (?, ?, ?, ?)",
                         [response_id, time.time(), size, data])
            # Newest first: past the count, or past the byte budget counted from the newest down, goes.
            gone = conn.execute(
                "DELETE FROM api_responses WHERE id IN (SELECT id FROM (SELECT id, "
                "ROW_NUMBER() OVER (ORDER BY created_at DESC, rowid DESC) AS n, "
                "SUM(bytes) OVER (ORDER BY created_at DESC, rowid DESC) AS total FROM api_responses) "
                "WHERE n > ? OR total > ?)", [self.max_count, self.max_bytes]).rowcount
        if gone:
            log.info("stored API responses: %d oldest evicted", gone)
        return True

    def get(self, response_id: str) -> dict[str, Any] | None:
        row = self.db.query_one("SELECT data FROM api_responses WHERE id = ?", [response_id])
        if row is None:
            return None
        record = json.loads(row[0])
        return record if isinstance(record, dict) else None

    def delete(self, response_id: str) -> bool:
        return self.db.execute("DELETE FROM api_responses WHERE id = ?", [response_id]).rowcount > 0

    def count(self) -> int:
        row = self.db.query_one("SELECT count(*) FROM api_responses")
        return int(row[0]) if row else 0
