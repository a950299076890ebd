"""One prepared prompt per send, on the real engine: the prompt is tokenized once (the fit check and the KV
restore use those tokens), the engine generates from the same tokens (no chat template rendered for the reply),
and a prompt that does not fit records nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hisho.core.conversations.chat import ChatService, FitReport
from hisho.core.conversations.store import ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import Generate, Request, StateLoad, Tokenize
from hisho.core.engine.protocol import LoadParams
from hisho.core.engine.stream import Stream
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession

SHORT = ChatSettings(temperature=0.0, max_tokens=8, seed=1)


class Recording(EngineClient):
    """The real engine client, keeping each request it sends (an instrument, not a stand-in)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Any] = []

    def call(self, request: Request | str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.sent.append(request)
        return super().call(request, params)

    def stream(self, request: Request | str, params: dict[str, Any] | None = None) -> Stream:
        self.sent.append(request)
        return super().stream(request, params)


def test_a_send_tokenizes_once_and_generates_from_those_tokens(tmp_path: Path, default_model_path: Path) -> None:
    store = ConversationStore(Database(tmp_path / "chats.sqlite3"))
    with Recording() as engine:
        engine.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2))
        service = ChatService(store, engine)
        session = KVSession(engine, KVIndex(Database(tmp_path / "kv.sqlite3"), tmp_path / "kv"),
                            budget_bytes=1 << 30)
        KVChat(service, session).install()
        cid = store.create(settings=SHORT, system_prompt="Answer briefly.").id
        service.run(service.send(cid, "Name a colour."))           # a first turn, saved as KV
        session.flush()

        engine.sent.clear()
        made = service.send_if_fits(cid, "And another one?")
        assert not isinstance(made, FitReport)
        turn, prompt = made
        assert prompt.fit.fits and prompt.tokens is not None and prompt.fit.prompt_tokens == len(prompt.tokens)
        result = service.run(turn, prompt=prompt)
        until_reply = engine.sent[:next(i for i, r in enumerate(engine.sent) if isinstance(r, Generate)) + 1]
        tokenizes = [r for r in until_reply if isinstance(r, Tokenize)]
        assert len(tokenizes) == 1 and tokenizes[0].messages == prompt.messages   # one render, one tokenization
        [restore] = [r for r in until_reply if isinstance(r, StateLoad)]
        assert restore.tokens == prompt.tokens                                  # KV restored by those tokens
        generate = until_reply[-1]
        assert generate.tokens == prompt.tokens and generate.messages is None   # the reply from the same tokens
        assert result.message.status == "done" and result.message.content
        assert result.message.prompt_tokens == len(prompt.tokens)
    store.close()


def test_a_prompt_that_does_not_fit_records_nothing(tmp_path: Path, default_model_path: Path) -> None:
    store = ConversationStore(Database(tmp_path / "chats.sqlite3"))
    with EngineClient() as engine:
        engine.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        service = ChatService(store, engine)
        cid = store.create(settings=SHORT).id
        got = service.send_if_fits(cid, "word " * 600)
        assert isinstance(got, FitReport) and not got.fits and got.prompt_tokens > 512
        assert store.branch(cid) == []                                          # the user chooses first
    store.close()
