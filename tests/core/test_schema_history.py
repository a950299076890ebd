"""The schema steps, now written with sqlite-utils, against the plain-SQL steps as released
(tests/core/schema_as_released.py): a fresh database has the same tables, columns, types, defaults, keys and
indexes as one made by the released steps; a database made by them opens, upgrades and keeps its rows and search;
a step may change a table other tables point at (``transform``) without cascading deletes; upserts update in
place."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from hisho.core.conversations import schema as conv_schema
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.documents import cache as doc_cache
from hisho.core.hub import download
from hisho.core.kv import index as kv_index
from hisho.core.models import store as model_store
from tests.core import schema_as_released as released


def _shape(db: Database) -> dict[str, Any]:
    """Every table's columns (name, declared type, not null, default, key position), foreign keys and indexes."""
    tables = [r["name"] for r in db.query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE '%_fts_%' AND name != 'hisho_schema' ORDER BY name")]
    out: dict[str, Any] = {}
    for t in tables:
        cols = [(r["name"], r["type"].upper(), r["notnull"], r["dflt_value"], r["pk"])
                for r in db.query(f"PRAGMA table_xinfo('{t}')")]
        fks = sorted((r["table"], r["from"], r["to"], r["on_delete"]) for r in db.query(f"PRAGMA foreign_key_list('{t}')"))
        idx = sorted((r["name"], r["unique"], tuple(c["name"] for c in db.query(f"PRAGMA index_info('{r['name']}')")))
                     for r in db.query(f"PRAGMA index_list('{t}')") if r["origin"] == "c")
        out[t] = {"columns": cols, "foreign_keys": fks, "indexes": idx}
    out["triggers"] = sorted(r["name"] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
    return out


COMPONENTS: list[tuple[str, Sequence[Callable[..., None]], Sequence[Callable[..., None]]]] = [
    (conv_schema.COMPONENT, released.CONVERSATIONS, conv_schema.STEPS),
    (kv_index.COMPONENT, released.KV, kv_index.STEPS),
    (doc_cache.COMPONENT, released.DOCUMENTS, doc_cache.STEPS),
    (model_store.COMPONENT, released.MODELS, [model_store._v1_table, lambda db: None]),
    (download.COMPONENT, released.DOWNLOADS, [download._v1]),
]


@pytest.mark.parametrize("component, old, new", COMPONENTS, ids=[c[0] for c in COMPONENTS])
def test_fresh_schema_is_the_released_one(component: str, old: Sequence[Any], new: Sequence[Any]) -> None:
    then, now = Database(":memory:"), Database(":memory:")
    then.migrate(component, old)
    now.migrate(component, new[:len(old)])  # steps added since the release have no plain-SQL twin
    assert _shape(now) == _shape(then)
    assert len(_shape(now)) > 1


def test_a_released_database_opens_upgrades_and_keeps_its_search(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = Database(path)
    db.migrate(conv_schema.COMPONENT, released.CONVERSATIONS[:1])      # the first release
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created_at) "
               "VALUES (1, 'user', 'ancient walrus question', 1)")
    db.migrate(conv_schema.COMPONENT, released.CONVERSATIONS[:3])      # a later one: FTS and drafts
    db.execute("INSERT INTO messages (conversation_id, parent_id, role, content, created_at) "
               "VALUES (1, 1, 'assistant', 'a walrus answer', 2)")
    db.close()
    store = ConversationStore(Database(path))
    assert store.db.version(conv_schema.COMPONENT) == len(conv_schema.STEPS)

    def found(word: str) -> list[int]:
        return [r["rowid"] for r in store.db.query(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid", [word])]

    assert found("walrus") == [1, 2] and [h.conversation_id for h in store.search("walrus")] == [1]
    new = store.add_message(1, "user", "walrus again", parent_id=2, engine="box")
    store.update_message(new.id, content="narwhal instead")
    assert found("narwhal") == [new.id] and found("again") == [] and found("walrus") == [1, 2]
    assert store.message(new.id).engine == "box" and store.get(1).draft == ""


def test_a_step_may_rebuild_a_table_that_others_point_at() -> None:
    db = Database(":memory:")
    store = ConversationStore(db)
    conv = store.create("kept")
    first = store.add_message(conv.id, "user", "hello walrus")
    store.add_message(conv.id, "assistant", "hi", parent_id=first.id)

    def rebuild(u: Any) -> None:     # drops and renames conversations; messages cascade on its delete
        u.table("conversations").transform(types={"pinned": str}, defaults={"pinned": "0"})

    db.migrate("rebuild", [rebuild])
    assert len(store.messages(conv.id)) == 2                      # nothing cascaded
    assert db.query("SELECT type FROM pragma_table_info('conversations') WHERE name = 'pinned'") == [
        {"type": "TEXT"}]
    assert db.query_one("PRAGMA foreign_keys") == (1,)            # back on after the step
    assert [h.message_id for h in store.search("walrus")] == [first.id]


def test_a_step_that_leaves_rows_pointing_nowhere_is_rolled_back() -> None:
    db = Database(":memory:")
    store = ConversationStore(db)
    store.add_message(store.create("c").id, "user", "x")

    def orphan(u: Any) -> None:
        u.execute("DELETE FROM conversations")

    with pytest.raises(Exception, match="points nowhere"):
        db.migrate("orphan", [orphan])
    assert db.version("orphan") == 0 and db.query_one("SELECT count(*) FROM conversations") == (1,)


def test_upsert_updates_in_place_and_keeps_what_it_does_not_name() -> None:
    db = Database(":memory:")
    idx = kv_index.KVIndex(db, Path("/nonexistent-kv"))
    idx.record_save("conv:1", "fp", [{"key": "k", "parent": "", "start": 0, "n_tokens": 4, "tokens": [1, 2, 3, 4],
                                      "path": "/nonexistent-kv/fp/k.hkv", "bytes": 40}])
    idx.set_pinned("conv:1", True)
    idx.record_save("conv:1", "fp", [{"key": "k2", "parent": "k", "start": 4, "n_tokens": 4,
                                      "tokens": [5, 6, 7, 8], "path": "/nonexistent-kv/fp/k2.hkv", "bytes": 40}])
    rows = db.query("SELECT owner, tip, n_tokens, pinned FROM kv_entries")
    assert rows == [{"owner": "conv:1", "tip": "k2", "n_tokens": 8, "pinned": 1}]   # pinned survived the update


def test_opening_an_up_to_date_database_does_not_import_sqlite_utils(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    ConversationStore(Database(path)).close()                    # made, and migrated, here
    code = ("import sys; from hisho.core.db import Database; from hisho.core.conversations.store import "
            f"ConversationStore; s = ConversationStore(Database({str(path)!r})); s.search('x'); "
            "print('sqlite_utils' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"                        # a window's start pays nothing for it
