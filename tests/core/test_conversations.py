"""The conversation store on a real SQLite file: branches, FTS, soft delete, schema upgrade, export/import."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hisho.core.conversations.store import (
    COMPONENT,
    INTERRUPTED,
    STEPS,
    STREAMING,
    ChatSettings,
    ConversationStore,
)
from hisho.core.db import Database, DatabaseUnavailable, SchemaTooNew
from hisho.core.documents import exchange as conversation_io
from hisho.core.errors import UserError


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    return ConversationStore(Database(tmp_path / "c.sqlite3"))


def _chat(store: ConversationStore, *pairs: tuple[str, str]) -> int:
    conv = store.create("Trip planning", model="m", system_prompt="Be brief.")
    for user, reply in pairs:
        u = store.add_message(conv.id, "user", user, parent_id=store.get(conv.id).leaf_id)
        store.add_message(conv.id, "assistant", reply, parent_id=u.id, tokens=3, tokens_per_s=50.0)
    return conv.id


def test_branch_follows_leaf_and_edits_keep_old_branch(store: ConversationStore) -> None:
    cid = _chat(store, ("Where to go in May?", "Lisbon."), ("And in June?", "Oslo."))
    first_user = store.branch(cid)[2]
    assert [m.content for m in store.branch(cid)] == ["Where to go in May?", "Lisbon.", "And in June?", "Oslo."]
    edited = store.add_message(cid, "user", "And in July?", parent_id=first_user.parent_id)
    store.add_message(cid, "assistant", "Tromsø.", parent_id=edited.id)
    assert [m.content for m in store.branch(cid)][-2:] == ["And in July?", "Tromsø."]
    assert store.siblings(edited.id) == [first_user.id, edited.id]
    store.switch_branch(first_user.id)
    assert [m.content for m in store.branch(cid)][-2:] == ["And in June?", "Oslo."]


def test_delete_message_removes_its_subtree_and_moves_leaf(store: ConversationStore) -> None:
    cid = _chat(store, ("a", "b"), ("c", "d"))
    third = store.branch(cid)[2]
    conv = store.delete_message(third.id)
    assert [m.content for m in store.branch(cid)] == ["a", "b"]
    assert conv.leaf_id == store.branch(cid)[-1].id
    assert len(store.messages(cid)) == 2


def test_deleted_messages_come_back_with_undo(store: ConversationStore) -> None:
    cid = _chat(store, ("a", "b"), ("c", "d"))
    second = store.branch(cid)[1]
    store.add_message(cid, "assistant", "b2", parent_id=store.branch(cid)[0].id)  # a version on another branch
    store.switch_branch(second.id)
    before = [(m.id, m.content) for m in store.messages(cid)]
    shown = [m.content for m in store.branch(cid)]
    assert store.subtree_size(second.id) == 3
    deleted = store.take_messages(second.id)
    assert deleted.count == 3 and [m.content for m in store.branch(cid)] == ["a", "b2"]
    assert store.search("c") == []
    store.put_back(deleted)
    assert [(m.id, m.content) for m in store.messages(cid)] == before  # same ids: nothing else refers elsewhere
    assert [m.content for m in store.branch(cid)] == shown
    assert store.search("c")[0].conversation_id == cid  # back in the search index
    newest = max(store.messages(cid), key=lambda m: m.id)  # "b2", on the other branch
    again = store.take_messages(newest.id)
    reused = store.add_message(cid, "assistant", "written meanwhile", parent_id=store.branch(cid)[-1].id)
    assert reused.id == newest.id  # SQLite reuses the highest id: put_back must not collide with it
    store.put_back(again)
    assert store.message(reused.id).content == "written meanwhile"
    assert sorted(m.content for m in store.messages(cid)) == ["a", "b", "b2", "c", "d", "written meanwhile"]


def test_search_finds_words_and_prefixes_and_survives_syntax(store: ConversationStore) -> None:
    cid = _chat(store, ("Tell me about the lighthouse keeper", "He found a bottle."))
    other = _chat(store, ("Recipe for pancakes?", "Flour, eggs, milk."))
    assert [h.conversation_id for h in store.search("lighthouse")] == [cid]
    assert [h.conversation_id for h in store.search("pancak")] == [other]
    assert "[" in store.search("bottle")[0].snippet
    for nasty in ('"', "AND OR NOT", "a*b(c", "NEAR(", "'; DROP TABLE messages; --"):
        store.search(nasty)  # never an FTS syntax error
    assert store.search("   ") == []
    store.update_message(store.branch(cid)[1].id, content="She found a map.")
    assert store.search("bottle") == [] and store.search("map")[0].conversation_id == cid
    assert [h.conversation_id for h in store.search("Trip")] != []  # titles match too


def test_soft_delete_restore_and_purge(store: ConversationStore) -> None:
    cid = _chat(store, ("unique-word-zebra", "ok"))
    store.delete(cid)
    assert cid not in [c.id for c in store.conversations()] and store.search("zebra") == []
    store.restore(cid)
    assert cid in [c.id for c in store.conversations()]
    store.delete(cid)
    assert store.purge_deleted() == 1
    assert store.db.query("SELECT count(*) AS n FROM messages")[0]["n"] == 0
    assert store.search("zebra") == []


def test_pinned_first_then_recent_and_draft_does_not_reorder(store: ConversationStore) -> None:
    a = store.create("a")
    b = store.create("b")
    store.update(a.id, pinned=True)
    c = store.create("c")
    assert [x.id for x in store.conversations()] == [a.id, c.id, b.id]
    store.update(b.id, draft="half typed")
    assert [x.id for x in store.conversations()] == [a.id, c.id, b.id]
    assert store.get(b.id).draft == "half typed"


def test_streaming_rows_become_interrupted_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    s = ConversationStore(Database(path))
    cid = _chat(s, ("q", "a"))
    m = s.add_message(cid, "assistant", "partial te", parent_id=s.branch(cid)[0].id, status=STREAMING)
    s.close()
    again = ConversationStore(Database(path))
    assert again.message(m.id).status == INTERRUPTED and again.message(m.id).partial
    assert again.message(m.id).content == "partial te"


def test_schema_upgrade_from_v1_indexes_old_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = Database(path)
    db.migrate(COMPONENT, STEPS[:1])  # what the first release wrote
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created_at) "
               "VALUES (1, 'user', 'ancient walrus question', 1)")
    db.close()
    store = ConversationStore(Database(path))
    assert store.db.version(COMPONENT) == len(STEPS)
    assert [h.conversation_id for h in store.search("walrus")] == [1]
    assert store.get(1).draft == ""


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite3"
    ConversationStore(Database(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE hisho_schema SET version = 99 WHERE component = ?", [COMPONENT])
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer Hisho"):
        ConversationStore(Database(path))


def test_read_only_store_reads_but_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    s = ConversationStore(Database(path))
    cid = _chat(s, ("hello", "hi"))
    s.close()
    ro = ConversationStore(Database(path, read_only=True))
    assert [m.content for m in ro.branch(cid)] == ["hello", "hi"]
    with pytest.raises(DatabaseUnavailable, match="read-only"):
        ro.create("x")


def test_corrupt_file_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DatabaseUnavailable):
        ConversationStore(Database(path))


def test_export_import_round_trip_keeps_tree(store: ConversationStore, tmp_path: Path) -> None:
    cid = _chat(store, ("Write `code`", "```python\nprint('hi')\n```"), ("more", "sure"))
    store.update(cid, settings=ChatSettings(temperature=0.2, seed=7), pinned=True)
    first_user = store.branch(cid)[2]
    store.add_message(cid, "user", "alternative", parent_id=first_user.parent_id)
    out = conversation_io.export_file(store, cid, tmp_path / "c.json")
    new_id = conversation_io.import_file(store, out)
    assert new_id != cid
    a, b = conversation_io.to_json(store, cid), conversation_io.to_json(store, new_id)
    strip = lambda d: [(m["role"], m["content"], m.get("tokens")) for m in d["messages"]]  # noqa: E731
    assert strip(a) == strip(b)
    assert [m.content for m in store.branch(new_id)] == [m.content for m in store.branch(cid)]
    assert store.get(new_id).settings == ChatSettings(temperature=0.2, seed=7)
    assert len(store.siblings(store.branch(new_id)[-1].id)) == 2
    md = conversation_io.export_file(store, cid, tmp_path / "c.md").read_text()
    assert md.startswith("# Trip planning") and "```python" in md and "## You" in md


@pytest.mark.parametrize("payload, message", [
    ({"format": "other"}, "not a Hisho conversation"),
    ({"format": "hisho-conversation", "version": 9, "conversation": {}, "messages": []}, "format version 9"),
    ({"format": "hisho-conversation", "version": 1, "conversation": {}, "messages": [{"role": "x"}]},
     "malformed"),
    ({"format": "hisho-conversation", "version": 1, "conversation": {},
      "messages": [{"id": 1, "parent": 5, "role": "user", "content": "x"}]}, "parent"),
])
def test_import_refuses_bad_files_and_writes_nothing(store: ConversationStore, tmp_path: Path,
                                                     payload: dict[str, object], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(UserError, match=message):
        conversation_io.import_file(store, path)
    assert store.conversations() == []
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        conversation_io.import_file(store, tmp_path / "junk.json")


def test_export_keeps_a_reasoning_models_thinking(store: ConversationStore, tmp_path: Path) -> None:
    """The thinking is part of the reply: Markdown shows it folded above the answer, JSON carries it and its
    time, and an import gives it back."""
    chat = store.create("Riddle")
    u = store.add_message(chat.id, "user", "What has keys but no locks?")
    store.add_message(chat.id, "assistant", "A piano.", parent_id=u.id, reasoning="Keys... a keyboard? A piano.",
                      reasoning_s=3.2)
    md = conversation_io.to_markdown(store, chat.id)
    assert "<summary>Thought for 3 s</summary>" in md and "Keys... a keyboard? A piano." in md
    assert md.index("Keys... a keyboard") < md.index("\nA piano.")
    new_id = conversation_io.import_file(store, conversation_io.export_file(store, chat.id, tmp_path / "r.json"))
    reply = store.branch(new_id)[-1]
    assert (reply.content, reply.reasoning, reply.reasoning_s) == ("A piano.", "Keys... a keyboard? A piano.", 3.2)
