"""The Qt-free chat service on the real engine and a real store: turns, cancel, crash, fit, hooks, terminal chat."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from hisho.cli.chat import TerminalChat
from hisho.core.conversations.chat import ChatService, FitReport, Turn, TurnResult
from hisho.core.conversations.store import DONE, FAILED, STOPPED, ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.errors import UserError

SHORT = ChatSettings(temperature=0.0, max_tokens=16, repeat_penalty=1.0)
LONG = ChatSettings(temperature=0.0, max_tokens=400, repeat_penalty=1.0)


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    return ConversationStore(Database(tmp_path / "chat.sqlite3"))


@pytest.fixture
def service(store: ConversationStore, engine: EngineClient) -> ChatService:
    return ChatService(store, engine, model_name="smollm2")


def test_turn_streams_and_persists(service: ChatService, store: ConversationStore) -> None:
    cid = store.create(settings=SHORT).id
    pieces: list[str] = []
    result = service.run(service.send(cid, "Say hello."), pieces.append)
    m = result.message
    assert m.status == DONE and m.content == "".join(pieces) and m.content.strip()
    assert m.tokens == len(pieces) and m.prompt_tokens and m.model == "smollm2"
    assert [x.role for x in store.branch(cid)] == ["user", "assistant"]
    assert store.get(cid).title == "Say hello."
    assert result.prompt_messages == [{"role": "user", "content": "Say hello."}]


def test_greedy_regenerate_and_edit_make_siblings(service: ChatService, store: ConversationStore) -> None:
    cid = store.create(settings=SHORT, system_prompt="Answer briefly.").id
    first = service.run(service.send(cid, "Name a fruit.")).message
    again = service.run(service.regenerate(first.id)).message
    assert again.content == first.content  # greedy: same prompt, same reply
    assert store.siblings(again.id) == [first.id, again.id]
    user = store.branch(cid)[0]
    assert store.get(cid).title == "Name a fruit."
    edited = service.run(service.edit(user.id, "Name a vegetable.")).message
    assert [m.content for m in store.branch(cid)][0] == "Name a vegetable."
    assert store.get(cid).title == "Name a vegetable."  # the title made from the first message follows it
    assert store.siblings(store.branch(cid)[0].id) == [user.id, store.branch(cid)[0].id]
    assert edited.parent_id == store.branch(cid)[0].id
    with pytest.raises(UserError):
        service.regenerate(user.id)
    with pytest.raises(UserError):
        service.send(cid, "  \n ")


def test_cancel_keeps_partial_reply_marked_stopped(service: ChatService, store: ConversationStore) -> None:
    cid = store.create(settings=LONG).id
    turn = service.send(cid, "Write a long story about a dragon.")
    got_some = threading.Event()

    def on_text(_piece: str) -> None:
        if len(turn.text) > 10:
            got_some.set()
            turn.cancel()

    result = service.run(turn, on_text)
    assert got_some.is_set()
    m = result.message
    assert m.status == STOPPED and m.partial and m.content == turn.text and m.tokens < LONG.max_tokens


def test_engine_crash_mid_reply_keeps_partial_and_next_turn_works(store: ConversationStore,
                                                                 default_model_path: Path) -> None:
    with EngineClient(test_hooks=True) as engine:
        engine.load(LoadParams(model_path=str(default_model_path), n_ctx=1024))
        service = ChatService(store, engine)
        cid = store.create(settings=LONG).id
        turn = service.send(cid, "Write a long story about a dragon.")

        def on_text(_piece: str) -> None:
            if len(turn.text) > 10 and engine.running:
                engine.kill()

        m = service.run(turn, on_text).message
        assert m.status == FAILED and m.content.strip() and "engine stopped" in m.error
        assert store.message(m.id).content == m.content
        store.update(cid, settings=SHORT)
        retry = service.run(service.regenerate(m.id)).message  # the client restarts and reloads the engine
        assert retry.status == DONE and engine.restarts == 1


def test_fit_and_drop_oldest(store: ConversationStore, default_model_path: Path) -> None:
    with EngineClient() as engine:
        engine.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        service = ChatService(store, engine)
        cid = store.create(settings=ChatSettings(temperature=0.0, max_tokens=8)).id
        parent = None
        for i in range(6):
            u = store.add_message(cid, "user", f"turn {i}: " + "word " * 60, parent_id=parent)
            parent = store.add_message(cid, "assistant", "ok " * 10, parent_id=u.id).id
        fit = service.check_fit(cid, "and now?")
        assert not fit.fits and fit.warn and fit.n_ctx == 512 and fit.prompt_tokens > 400
        assert service.check_fit(store.create().id, "hi").fits
        turn = service.send(cid, "and now?", drop_oldest=True)
        result = service.run(turn)
        assert result.message.status == DONE
        sent = result.prompt_messages
        assert sent[-1]["content"] == "and now?" and len(sent) < 13
        assert service.count(sent) + 8 <= 512
        assert len(store.branch(cid)) == 14  # nothing was deleted from the store


def test_summarize_into_new_chat(service: ChatService, store: ConversationStore) -> None:
    cid = store.create("Dragons", settings=SHORT).id
    service.run(service.send(cid, "My dragon is called Ember and she is red."))
    new_id = service.summarize_into_new(cid)
    new = store.get(new_id)
    assert new_id != cid and new.title == "Dragons (continued)"
    assert new.system_prompt.startswith("Summary of an earlier conversation") and store.branch(new_id) == []


def test_hooks_run_before_prompt_and_after_turn(service: ChatService, store: ConversationStore) -> None:
    calls: list[str] = []

    def before(turn: Turn, messages: list[dict[str, str]]) -> None:
        calls.append(f"before {turn.conversation_id} {len(messages)}")

    def after(result: TurnResult) -> None:
        calls.append(f"after {result.message.status}")

    service.before_prompt.append(before)
    service.after_turn.append(after)
    cid = store.create(settings=SHORT).id
    service.run(service.send(cid, "Hi"))
    assert calls == [f"before {cid} 1", "after done"]


def test_terminal_chat_session(service: ChatService, store: ConversationStore) -> None:
    store_conv = store.create("old", settings=SHORT)
    inp = io.StringIO(f"\n/open {store_conv.id}\nHello there\n/regen\n/list\n/bogus\n/quit\n")
    out = io.StringIO()
    assert TerminalChat(service, None, inp, out).loop() == 0
    text = out.getvalue()
    assert "# old" in text and "tok/s" in text and "unknown command /bogus" in text
    branch = store.branch(store_conv.id)
    assert [m.role for m in branch] == ["user", "assistant"] and len(store.siblings(branch[1].id)) == 2


def test_terminal_chat_sends_through_the_window_s_one_path(service: ChatService, store: ConversationStore,
                                                           engine: EngineClient) -> None:
    """``hisho chat`` sends as the window does (``send_if_fits``: the prompt built and tokenized once, then
    ``run`` with it): the same engine requests for the same send, none spent preparing the prompt twice."""
    window_chat = store.create(settings=SHORT).id
    before = engine.requests
    made = service.send_if_fits(window_chat, "Hello there")
    assert not isinstance(made, FitReport)
    service.run(made[0], None, made[1])
    window_requests = engine.requests - before
    terminal_chat = store.create(settings=SHORT).id
    before = engine.requests
    assert TerminalChat(service, terminal_chat, io.StringIO("Hello there\n"), io.StringIO()).loop() == 0
    assert engine.requests - before == window_requests
    assert [m.role for m in store.branch(terminal_chat)] == ["user", "assistant"]
