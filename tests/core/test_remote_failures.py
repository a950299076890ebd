"""The remote engine against a misbehaving server on loopback (tests/remote_stub.py): each failure is one clear
line, a partial reply is kept and marked, and the API key never reaches a log."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import DONE, FAILED, STOPPED, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.protocol import LoadParams
from hisho.core.remote import engine as engine_mod
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint, RemoteError
from hisho.core.remote.probe import probe
from tests.remote_stub import MODEL, StubServer

KEY = "sk-test-0123456789-secret"


def _engine(url: str) -> RemoteEngine:
    eng = RemoteEngine(Endpoint("box", url, api_key=KEY))
    eng.load(LoadParams(model_path=""))
    return eng


def _chat(eng: RemoteEngine) -> tuple[ChatService, int]:
    store = ConversationStore(Database(":memory:"))
    chat = ChatService(store, eng, model_name=MODEL)
    conv = store.create("remote")
    return chat, conv.id


def test_stream_reply_usage_and_cached_tokens() -> None:
    with StubServer("ok") as srv:
        eng = _engine(srv.url)
        chat, cid = _chat(eng)
        result = chat.run(chat.send(cid, "hi"))
    assert result.message.content == "Hello from the stub."
    assert result.message.status == DONE
    assert result.message.prompt_tokens == 40
    assert (result.message.engine, result.message.model) == ("box", MODEL)   # who answered is recorded
    body = srv.requests[-1]
    assert body["stream"] is True and body["model"] == MODEL
    assert body["messages"][-1] == {"role": "user", "content": "hi"}
    assert all(a == f"Bearer {KEY}" for a in srv.seen_auth)


def test_cached_tokens_from_openai_usage() -> None:
    with StubServer("ok") as srv:
        stream = _engine(srv.url).generate(messages=[{"role": "user", "content": "x"}])
        res = stream.collect()
    assert res.cached_tokens == 32 and res.prompt_tokens == 40 and res.extra["prompt_n"] == 8


def test_dropped_stream_keeps_partial_reply_marked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with StubServer("drop") as srv:
        chat, cid = _chat(_engine(srv.url))
        result = chat.run(chat.send(cid, "hi"))
    msg = result.message
    assert msg.content == "Hello from"             # what arrived is kept
    assert msg.status == FAILED and msg.partial
    assert "dropped the connection" in msg.error and "\n" not in msg.error
    assert KEY not in caplog.text


def test_server_down_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    info = probe(Endpoint("box", f"http://127.0.0.1:{port}", api_key=KEY))
    assert not info.ok and "cannot reach box" in info.error and "refused" in info.error
    with pytest.raises(RemoteError, match="cannot reach box"):
        _engine(f"http://127.0.0.1:{port}")


@pytest.mark.parametrize("mode, words", [
    ("badkey", "refused the API key"),
    ("html", "not an OpenAI-compatible server"),
    ("badhttp", "not an OpenAI-compatible server"),
])
def test_bad_servers_say_what_is_wrong(mode: str, words: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with StubServer(mode) as srv:
        info = probe(Endpoint("box", srv.url, api_key=KEY))
    assert words in info.error and "\n" not in info.error
    assert KEY not in info.error and KEY not in caplog.text


def test_missing_model() -> None:
    with StubServer("ok") as srv:
        eng = RemoteEngine(Endpoint("box", srv.url))
        with pytest.raises(RemoteError, match="has no model 'llama-70b'"):
            eng.load(LoadParams(model_path="llama-70b"))
        eng.load(LoadParams(model_path=MODEL))
        srv.mode = "nomodel"                           # removed on the server after we chose it
        chat, cid = _chat(eng)
        result = chat.run(chat.send(cid, "hi"))
    assert result.message.status == FAILED and "no such model" in result.message.error


def test_tls_to_a_plain_server_is_a_tls_error() -> None:
    with StubServer("ok") as srv:
        info = probe(Endpoint("box", srv.url.replace("http://", "https://")))
    assert "TLS" in info.error


def test_slow_server_reports_waiting_and_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "WAIT_NOTICE_S", 0.2)
    waited: list[str] = []
    with StubServer("slow", delay_s=1.0) as srv:
        eng = _engine(srv.url)
        eng.on_wait = waited.append
        res = eng.generate(messages=[{"role": "user", "content": "x"}]).collect()
    assert waited == ["box"] and res.text == "Hello from the stub." and res.extra["waited"]


def test_stop_closes_the_stream_and_keeps_text() -> None:
    with StubServer("endless") as srv:
        chat, cid = _chat(_engine(srv.url))
        turn = chat.send(cid, "go on forever")
        seen = threading.Event()

        def on_text(piece: str) -> None:
            if "more" in piece:
                seen.set()
                turn.cancel()

        result = chat.run(turn, on_text)
        assert srv.client_left.wait(10), "the server never saw the client go"
    assert result.message.status == STOPPED and result.message.content.startswith("Hello from the stub.")


def test_endpoint_repr_hides_key() -> None:
    assert KEY not in repr(Endpoint("box", "http://x", api_key=KEY))


def test_old_database_gains_engine_column(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hisho.core.conversations.store import STEPS

    path = tmp_path / "old.sqlite"
    old = Database(path)
    old.migrate("conversations", STEPS[:3])                    # a database from before this change
    old.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('t', 0, 0)")
    old.execute("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'x', 0)")
    old.close()
    store = ConversationStore(Database(path))
    assert store.messages(1)[0].engine == ""
    msg = store.add_message(1, "assistant", "y", parent_id=1, engine="box")
    assert store.message(msg.id).engine == "box"
