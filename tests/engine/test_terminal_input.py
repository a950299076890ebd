"""``hisho chat`` input and display (issue 16, point 6): bytes that are not UTF-8 on stdin do not end the
session, and escape sequences stored in messages (or written by the model) never reach the terminal raw."""

from __future__ import annotations

import io
from pathlib import Path

from hisho.cli.chat import TerminalChat, terminal_safe
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient

SHORT = ChatSettings(temperature=0.0, max_tokens=8, repeat_penalty=1.0)
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ \x9b31m"


def test_invalid_utf8_on_stdin_is_sent_with_replacement_characters(tmp_path: Path, engine: EngineClient) -> None:
    store = ConversationStore(Database(tmp_path / "chat.sqlite3"))
    cid = store.create(settings=SHORT).id
    # What Python's stdin gives under a C/POSIX locale: undecodable bytes kept as surrogates.
    raw = io.TextIOWrapper(io.BytesIO(b"caf\xe9 au lait \xff\xfe please\n/history\n"), encoding="utf-8",
                           errors="surrogateescape")
    out = io.StringIO()
    assert TerminalChat(ChatService(store, engine), cid, raw, out).loop() == 0
    user = store.branch(cid)[0]
    assert user.content == "caf\ufffd au lait \ufffd\ufffd please"
    assert store.branch(cid)[1].role == "assistant"
    assert "internal error" not in out.getvalue()


def test_history_never_prints_escape_sequences(tmp_path: Path, engine: EngineClient) -> None:
    store = ConversationStore(Database(tmp_path / "chat.sqlite3"))
    conv = store.create(ESCAPES, settings=SHORT)
    user = store.add_message(conv.id, "user", "look: " + ESCAPES)
    store.add_message(conv.id, "assistant", ESCAPES, parent_id=user.id)
    out = io.StringIO()
    TerminalChat(ChatService(store, engine), conv.id, io.StringIO("/history\n"), out).loop()
    shown = out.getvalue()
    assert not any(ch in shown for ch in "\x1b\x07\x9b")
    assert "␛]0;pwned␇" in shown and "red" in shown  # disarmed, still visible


def test_terminal_safe_keeps_text_and_layout() -> None:
    assert terminal_safe("a\tb\nc «é» 漢字") == "a\tb\nc «é» 漢字"
    assert terminal_safe("\x1b") == "␛" and terminal_safe("\r") == "␍"
