"""KV persistence through the real chat service: a reopened conversation resumes from disk, selecting a chat
prefetches it, typing ahead makes Send one decode step, deleting a chat deletes its KV."""

from __future__ import annotations

from pathlib import Path

from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession, next_turn_prefix

LONG = " ".join(f"Line {i}: the {('owl', 'fox', 'cat')[i % 3]} counts {i * 3} stars." for i in range(25))


def app(model: Path, tmp: Path) -> tuple[EngineClient, ChatService, KVChat]:
    """What the window builds at start-up, on one database and one KV folder."""
    engine = EngineClient()
    engine.load(LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2))
    db = Database(tmp / "hisho.sqlite3")
    service = ChatService(ConversationStore(db), engine)
    session = KVSession(engine, KVIndex(db, tmp / "kv"), chunk_tokens=64, budget_bytes=1 << 40)
    return engine, service, KVChat(service, session).install()


def test_reopened_conversation_resumes_from_disk(default_model_path: Path, tmp_path: Path) -> None:
    engine, service, kv = app(default_model_path, tmp_path)
    conv = service.store.create()
    first = service.run(service.send(conv.id, LONG + "\nWhich animal is on line 4?"))
    assert not first.error
    assert kv.session.flush(60)
    saved = kv.usage(conv.id)
    assert saved.n_tokens > 300 and saved.bytes > 0
    kv.session.close()
    engine.close()

    engine, service, kv = app(default_model_path, tmp_path)  # the app was closed and opened again
    try:
        history = service.prompt_messages(conv.id)
        head = next_turn_prefix(lambda t: engine.tokenize(messages=[*history, {"role": "user", "content": t}]))
        second = service.run(service.send(conv.id, "And on line 5?"))
        assert not second.error and second.message.content
        assert kv.last_restore is not None and not kv.last_restore.skipped
        assert kv.last_restore.restored >= 300  # the first turn came from disk, not from a prefill
        # The save after the first turn held the next user header too: the send prefilled only the new words
        # and the assistant header.
        assert kv.last_restore.restored == len(head) > len(engine.tokenize(messages=history,
                                                                            add_generation_prompt=False))

        # Selecting the chat prefetches; typing ahead leaves only one token for Send.
        engine.call("seq_rm", {"seq": 0, "start": 0})
        kv.selected(conv.id)
        assert kv.session.wait_idle(60)
        kv.draft(conv.id, "What about line 6?")
        assert kv.session.wait_idle(60) and kv.session.wait_drafted(60)
        third = service.run(service.send(conv.id, "What about line 6?"))
        assert not third.error
        assert kv.last_restore is not None and kv.last_restore.skipped
        assert kv.session.flush(60)

        kv.deleted(conv.id)
        assert kv.session.wait_idle(60)
        assert kv.usage(conv.id).bytes == 0 and not list((tmp_path / "kv").rglob("*.hkv"))
        assert [m.content for m in service.store.branch(conv.id)][0].startswith("Line 0")  # text untouched
    finally:
        kv.session.close()
        engine.close()


def test_a_prefix_held_in_memory_is_reported_before_its_save_is_indexed(default_model_path: Path,
                                                                        tmp_path: Path) -> None:
    """A send that comes while the save of what the engine just read is still on its way to the index (a
    document read on the chat sequence, then its first question, on a busy machine) finds nothing on disk; the
    engine still holds the prefix, and the report says so (it said 0 restored, and a question that read only
    itself looked like one that read the document again)."""
    engine, service, kv = app(default_model_path, tmp_path)
    try:
        prompt = [{"role": "user", "content": LONG}]
        tokens = engine.tokenize(messages=prompt)
        engine.call("prefill", {"seq": 0, "messages": prompt})  # held, never saved
        report = kv.session.restore("conv:99", tokens)
        assert report.skipped and report.restored >= len(tokens) - 1 and report.loaded_bytes == 0
        engine.call("seq_rm", {"seq": 0, "start": 0})
        assert kv.session.restore("conv:99", tokens).restored == 0
    finally:
        kv.session.close()
        engine.close()
