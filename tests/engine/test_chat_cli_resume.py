"""``hisho chat`` is wired by the same composition root as the window: a long chat reopened in the terminal
resumes from its saved KV (the same restore the window does), and the hooks run in the declared order."""

from __future__ import annotations

import functools
import io
import logging
import sys
from pathlib import Path

import pytest

from hisho.cli.main import main
from hisho.core import services, settings
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database

LONG = " ".join(f"Line {i}: the {('owl', 'fox', 'cat')[i % 3]} counts {i * 3} stars." for i in range(25))


def run_chat(monkeypatch: pytest.MonkeyPatch, lines: list[str], *args: str) -> str:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["chat", *args]) == 0
    return out.getvalue()


def test_terminal_chat_resumes_a_long_chat_from_kv(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture,
                                                   default_model_path: Path) -> None:
    first = run_chat(monkeypatch, [LONG + " Which animal is on line 4?"])
    assert "(conversation 1)" in first

    caplog.set_level(logging.INFO, logger="hisho.kv")
    second = run_chat(monkeypatch, ["And on line 5?"], "--conversation", "1")
    assert "And on line 5?" not in second.split("# ")[0]  # the history is shown first
    restored = [r.getMessage() for r in caplog.records if r.getMessage().startswith("conversation 1: ")]
    assert restored, "the second session prefilled the whole chat instead of restoring its KV"
    tokens = int(restored[-1].split()[2])
    assert tokens > 300  # the long first turn came back from disk (or the prefetch), not from a prefill


def test_hooks_are_declared_in_one_order(default_model_path: Path) -> None:
    app = services.build(None, "chat")
    try:
        assert app.kv is not None
        assert app.chat.before_prompt == [app.documents.before_prompt]
        assert app.chat.restore_prompt == [app.kv.restore]
        assert app.chat.after_turn[0] == app.kv.after_turn and len(app.chat.after_turn) == 2
        speed = app.chat.after_turn[1]  # then the reply's speeds are kept for the local model
        assert isinstance(speed, functools.partial) and speed.func is services.record_speed
    finally:
        app.close()


def test_a_new_terminal_chat_starts_with_the_default_system_prompt(monkeypatch: pytest.MonkeyPatch,
                                                                  default_model_path: Path) -> None:
    """Settings → System prompts' default applies to chats `hisho chat` makes, as to the window's."""
    prefs = settings.load()
    prefs.set("default_system_prompt", "Answer in one short sentence.")
    prefs.save()
    out = run_chat(monkeypatch, ["Say hi."])
    assert "(conversation 1)" in out
    store = ConversationStore(Database())
    try:
        assert store.get(1).system_prompt == "Answer in one short sentence."
    finally:
        store.close()
