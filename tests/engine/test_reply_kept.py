"""The reply is part of what is kept: after each turn the sequence holds exactly the tokens the next prompt
renders for that reply (and the next user header) and is saved, so a follow-up reads only its own message and
the template's markup, from memory and after a restart from disk. On a sliding-window model (the tiny Gemma-3
true-shape file and the real Gemma-3-270M), through the real chat service.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.schema import ChatSettings
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession, next_turn_prefix
from tests.fixtures.gguf_shapes import true_model

# Past Gemma-3's 512-token window, so the window cache no longer holds the first turn's start.
LONG = " ".join(f"Line {i}: the {('owl', 'fox', 'cat')[i % 3]} counts {i * 3} stars." for i in range(90))
SETTINGS = ChatSettings(temperature=0.0, max_tokens=24, repeat_penalty=1.3)


def app(model: Path, tmp: Path) -> tuple[EngineClient, ChatService, KVChat]:
    engine = EngineClient()
    engine.load(LoadParams(model_path=str(model), n_ctx=4096, n_seq_max=2, n_threads=1))
    db = Database(tmp / "hisho.sqlite3")
    service = ChatService(ConversationStore(db), engine)
    session = KVSession(engine, KVIndex(db, tmp / "kv"), chunk_tokens=512, budget_bytes=1 << 40)
    return engine, service, KVChat(service, session).install()


def next_head(engine: EngineClient, service: ChatService, cid: int) -> list[int]:
    """The tokens every next prompt of ``cid`` starts with: the history, its replies as the template renders
    them, and the next user header."""
    history = service.prompt_messages(cid)
    return next_turn_prefix(lambda t: list(engine.tokenize(messages=[*history, {"role": "user", "content": t}])))


@pytest.fixture(params=["gemma-3-tiny", "gemma-3-270m"])
def model(request: pytest.FixtureRequest) -> Path:
    if request.param == "gemma-3-270m":
        return Path(request.getfixturevalue("real_gemma_path"))
    return true_model(str(request.param), "Q8_0")


def test_a_follow_up_reads_only_its_own_message(model: Path, tmp_path: Path) -> None:
    engine, service, kv = app(model, tmp_path)
    try:
        cid = service.store.create(settings=SETTINGS).id
        first = service.run(service.send(cid, LONG + "\nWhich animal is on line 4?"))
        assert not first.error and first.engine is not None and first.engine.prompt_tokens > 700
        head = next_head(engine, service, cid)
        second = service.run(service.send(cid, "And on line 5?"))  # a short follow-up on a long conversation
        assert not second.error and second.engine is not None
        assert second.engine.cached_tokens == len(head)  # the first reply was kept as the next prompt renders it
        head = next_head(engine, service, cid)
        third = service.run(service.send(cid, "And line 6?"))
        assert not third.error and third.engine is not None
        assert third.engine.cached_tokens == len(head)
        read = third.engine.prompt_tokens - third.engine.cached_tokens
        assert 0 < read < 24  # its own words and the assistant header, nothing of the history
        assert kv.session.flush(60)
    finally:
        kv.session.close()
        engine.close()

    engine, service, kv = app(model, tmp_path)  # a restart: the second and third replies came from disk
    try:
        head = next_head(engine, service, cid)
        fourth = service.run(service.send(cid, "And line 7?"))
        assert not fourth.error and fourth.engine is not None
        assert kv.last_restore is not None and not kv.last_restore.skipped
        assert kv.last_restore.restored == len(head) == fourth.engine.cached_tokens
        assert 0 < fourth.engine.prompt_tokens - fourth.engine.cached_tokens < 24
    finally:
        kv.session.close()
        engine.close()
