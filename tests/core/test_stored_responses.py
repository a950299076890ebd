"""The Responses API's kept responses in the app's database: kept, read back, deleted, bounded by count and by
bytes with the oldest evicted first, and still there when the database is opened again."""

from __future__ import annotations

from pathlib import Path

from hisho.core.db import Database
from hisho.core.stored_responses import COMPONENT, STEPS, StoredResponses


def test_put_get_delete_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "hisho.sqlite3"
    store = StoredResponses(Database(path))
    record = {"messages": [{"role": "user", "content": "Grüße"}], "response": {"id": "resp_1", "output": []}}
    store.put("resp_1", record)
    assert store.get("resp_1") == record and store.get("resp_2") is None
    store.db.close()
    again = StoredResponses(Database(path))
    assert again.db.version(COMPONENT) == len(STEPS)
    assert again.get("resp_1") == record
    assert again.delete("resp_1") and not again.delete("resp_1")
    assert again.get("resp_1") is None


def test_the_oldest_go_first_past_the_count() -> None:
    store = StoredResponses(Database(":memory:"), max_count=3)
    for i in range(5):
        store.put(f"resp_{i}", {"n": i})
    assert store.count() == 3
    assert [store.get(f"resp_{i}") for i in range(5)] == [None, None, {"n": 2}, {"n": 3}, {"n": 4}]


def test_the_oldest_go_first_past_the_bytes() -> None:
    store = StoredResponses(Database(":memory:"), max_bytes=2500)
    for i in range(4):
        store.put(f"resp_{i}", {"text": "x" * 1000})
    assert [store.get(f"resp_{i}") is not None for i in range(4)] == [False, False, True, True]
    assert not store.put("huge", {"text": "y" * 5000})   # larger than the whole budget: not kept, evicts nothing
    assert store.get("huge") is None and store.count() == 2
