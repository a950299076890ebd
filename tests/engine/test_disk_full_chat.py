"""A disk that fills up before or during a reply (issue 16, point 1): a clear message, the engine stopped at
once, the reply kept in memory and saved when space returns. Real engine, real SQLite on a small tmpfs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hisho.cli.chat import TerminalChat
from hisho.core.conversations import chat as chat_mod
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import FAILED, ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from tests.faults import drain, fill, small_fs

LONG = ChatSettings(temperature=0.0, max_tokens=300, repeat_penalty=1.0)


def test_disk_full_during_a_reply_stops_the_engine_and_loses_nothing(
        tmp_path: Path, engine: EngineClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_mod, "SAVE_EVERY_S", 0.0)  # save after every piece: the first save after the fill fails
    with small_fs(tmp_path / "fs", 8 << 20) as fs:
        store = ConversationStore(Database(fs / "hisho.sqlite3"))
        service = ChatService(store, engine, model_name="smollm2")
        cid = store.create(settings=LONG).id
        shown: list[str] = []

        def on_text(piece: str) -> None:
            shown.append(piece)
            if len(shown) == 5:
                fill(fs)

        turn = service.send(cid, "Write a long story about a lighthouse keeper and a storm, in detail.")
        result = service.run(turn, on_text)
        assert result.error.startswith("disk full: ") and " needed on " in result.error
        assert result.turn.store_error is not None
        # The engine was told to stop: it did not run on to max_tokens.
        assert result.message.tokens is not None and result.message.tokens < LONG.max_tokens
        text = "".join(shown)
        assert result.message.content == text and service.unsaved
        # The next reply starts at once (the engine is idle); with the disk still full it cannot be recorded.
        with pytest.raises(chat_mod.UserError, match="disk full"):
            service.send(cid, "And then?")
        drain(fs)
        assert service.save_unsaved() == 0
        saved = store.message(result.message.id)
        lost = len(text) - len(saved.content)
        print(f"\ncharacters shown but lost after the disk filled mid-reply: {lost} of {len(text)}")  # figure (-s)
        assert lost == 0 and saved.content == text
        assert saved.status == FAILED and "disk filled up" in saved.error
        store.close()


def test_terminal_chat_on_a_full_disk_says_so_and_goes_on(tmp_path: Path, engine: EngineClient) -> None:
    with small_fs(tmp_path / "fs", 8 << 20) as fs:
        store = ConversationStore(Database(fs / "hisho.sqlite3"))
        cid = store.create(settings=LONG).id
        fill(fs)
        out = io.StringIO()
        chat = TerminalChat(ChatService(store, engine), cid, io.StringIO("hello there\n/history\n"), out)
        assert chat.loop() == 0
        assert "hisho: disk full: " in out.getvalue() and "free space and retry" in out.getvalue()
        assert "cannot rollback" not in out.getvalue()
        drain(fs)
        store.close()
