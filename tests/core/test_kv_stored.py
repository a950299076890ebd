"""Settings → KV cache's summary line: API prompts are counted as what they are, not as documents (issue 14)."""

from __future__ import annotations

from pathlib import Path

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.kv.index import KVIndex
from hisho.core.kv.stored import list_stored
from tests.core.test_kv_index import save


def test_summary_counts_api_prompts_apart_from_documents(tmp_path: Path) -> None:
    db = Database(tmp_path / "db.sqlite3")
    index = KVIndex(db, tmp_path / "kv")
    chat = ConversationStore(db).create("Trip ideas")
    save(index, f"conv:{chat.id}", list(range(10)))
    save(index, "doc:" + "ab" * 32, list(range(20, 36)))
    save(index, "api:0123456789abcdef", list(range(40, 60)))
    save(index, "api:fedcba9876543210", list(range(60, 80)))
    report = list_stored(index, 10**9)
    assert sorted(i.kind for i in report.items) == ["api", "api", "chat", "document"]
    assert report.counts() == "1 chat, 1 document, 2 API prompts"
    save(index, "someone-else", list(range(90, 94)))
    assert list_stored(index, 10**9).counts() == "1 chat, 1 document, 2 API prompts, 1 other"
    index.delete_owner("api:0123456789abcdef")
    index.delete_owner("api:fedcba9876543210")
    index.delete_owner("someone-else")
    assert list_stored(index, 10**9).counts() == "1 chat, 1 document"
