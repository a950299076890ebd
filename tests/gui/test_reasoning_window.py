"""A reasoning model in the window: its thinking streams into a fold above the answer ("Thinking… 3 s", then
"Thought for 5 s", closed), the answer bubble holds only the answer, the status bar gives the time to the answer
beside the time to the first token, and regenerate and the next turn keep the same behaviour.

The model is a true-shape tiny llama with the bundled tokenizer and Qwen3's real chat template
(tests/fixtures/templates); its random weights do not think, so every reply is forced through the engine (test
hook ``force_text``) and held after a few tokens so the test sees it mid-thought."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from hisho.bench.shapes import model_file
from hisho.core.conversations.store import DONE, ChatSettings
from hisho.core.engine.client import EngineClient
from hisho.core.engine.stream import Stream
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import make_window, wait_for, wait_idle, wait_reply

TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "templates" / "Qwen-Qwen3.jinja"
THOUGHT = "The user greets me. A short, friendly greeting back is right; nothing to look up."
ANSWER = "Hello! How can I help you today?"
FORCED = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"


@pytest.fixture
def reasoning_window(qtbot: QtBot, default_model_path: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> Iterator[MainWindow]:
    monkeypatch.setenv("HISHO_ENGINE_TEST_HOOKS", "1")
    w = make_window(qtbot)
    path = model_file("llama-tiny", "Q4_0", chat_template=TEMPLATE.read_text(encoding="utf-8"))
    w.controller.switch_model(str(path), override=True)
    wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
             and w.ctx.engine.load_params.model_path == str(path), 300_000)
    wait_idle(qtbot, w)
    yield w
    w.close()


def force_replies(monkeypatch: pytest.MonkeyPatch, w: MainWindow, hold_after: int = 0) -> EngineClient:
    engine = w.ctx.engine
    assert isinstance(engine, EngineClient) and engine.engine_info.get("test_hooks") is True
    plain = engine.generate
    hold = [hold_after]

    def forced(**kwargs: Any) -> Stream:
        hooks: dict[str, Any] = {"force_text": FORCED}
        if hold[0]:
            # The first reply only: the test lets that one go. (Every reply held made the regenerate and the
            # edit-resend below each wait out the engine's 120 s hold: 4 minutes of every run of the suite.)
            hooks["hold_after_tokens"], hold[0] = hold[0], 0
        return plain(**kwargs, test_hooks=hooks)

    monkeypatch.setattr(engine, "generate", forced)
    return engine


def open_chat(qtbot: QtBot, w: MainWindow) -> int:
    conv = w.ctx.store.create("Thinking chat", settings=ChatSettings(temperature=0.0, max_tokens=64))
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    return conv.id


def shown_texts(widget: Any) -> list[str]:
    return [lab.text() for lab in widget.findChildren(QLabel) if lab.isVisibleTo(widget)]


def test_a_reasoning_reply_folds_its_thinking_and_shows_only_the_answer(
        qtbot: QtBot, reasoning_window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    w = reasoning_window
    assert w.ctx.engine.reasoning.reasons
    engine = force_replies(monkeypatch, w, hold_after=6)
    cid = open_chat(qtbot, w)
    known = {m.id for m in w.ctx.store.branch(cid)}
    w.composer.set_text("Hi there")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    # Held mid-thought: the fold is open and says it is thinking; the answer has nothing yet.
    wait_for(qtbot, lambda: w.view.stream_widget is not None and w.view.stream_widget.thinking is not None)
    block = w.view.stream_widget.thinking
    assert block is not None and block.is_open and block.title().startswith("▾ Thinking…")
    assert w.view.stream_widget.text == ""
    engine.release_hold()
    wait_reply(qtbot, w, cid, known)
    reply = w.ctx.store.branch(cid)[-1]
    assert reply.status == DONE and reply.content == ANSWER and reply.reasoning == THOUGHT
    assert reply.reasoning_s is not None and reply.reasoning_s >= 0
    widget = w.view.widgets[reply.id]
    assert widget.text == ANSWER
    assert widget.thinking is not None and not widget.thinking.is_open
    assert widget.thinking.title().startswith("▸ Thought for ")
    assert all("<think>" not in t and "</think>" not in t for t in shown_texts(widget))
    assert not any(THOUGHT in t for t in shown_texts(widget)), "the thought is folded away"
    widget.thinking.header.click()
    assert widget.thinking.is_open and widget.thinking.body.text() == THOUGHT
    assert "answer" in w.status.ttft.text()

    # The next turn follows the template: Qwen3's drops earlier turns' reasoning, and Hisho passes it for the
    # template to decide (the stored reply keeps it apart from the answer).
    prompt = w.controller.service.prompt_messages(cid, extra_user="And now?")
    assert [m.get("reasoning_content") for m in prompt if m["role"] == "assistant"] == [THOUGHT]
    assert all(THOUGHT not in m["content"] for m in prompt)
    rendered = w.ctx.engine.detokenize(w.ctx.engine.tokenize(messages=prompt))
    assert THOUGHT not in rendered and ANSWER in rendered

    # Regenerate: the same fold, the same answer, as a second version.
    known = {m.id for m in w.ctx.store.branch(cid)}
    w.controller.sending.regenerate(reply.id)
    wait_reply(qtbot, w, cid, known)
    again = w.ctx.store.branch(cid)[-1]
    assert again.id != reply.id and again.content == ANSWER and again.reasoning == THOUGHT
    wait_for(qtbot, lambda: again.id in w.view.widgets)
    block = w.view.widgets[again.id].thinking
    assert block is not None and not block.is_open

    # Edit and resend the question: the new branch's reply folds its thinking the same way.
    user = w.ctx.store.branch(cid)[0]
    qtbot.mouseClick(w.view.widgets[user.id].buttons["edit"], Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: w.composer.editing_id == user.id)
    known = {m.id for m in w.ctx.store.messages(cid)}
    w.composer.set_text("Hello again")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    wait_reply(qtbot, w, cid, known)
    edited_user, edited_reply = w.ctx.store.branch(cid)
    assert edited_user.content == "Hello again" and edited_reply.id not in known
    assert edited_reply.content == ANSWER and edited_reply.reasoning == THOUGHT
    wait_for(qtbot, lambda: edited_reply.id in w.view.widgets)
    block = w.view.widgets[edited_reply.id].thinking
    assert block is not None and not block.is_open and w.view.widgets[edited_reply.id].text == ANSWER


def test_chat_settings_offer_thinking_where_the_template_lets_it_be_chosen(qtbot: QtBot) -> None:
    from hisho.core.conversations.store import Conversation
    from hisho.core.formats.reasoning import ReasoningFormat, ReasoningKind
    from hisho.gui.settings.settings_dialog import ConversationSettingsDialog

    conv = Conversation(1, "A chat", settings=ChatSettings())
    qwen = ConversationSettingsDialog(conv, [("m", "m")], reasoning=ReasoningFormat(
        ReasoningKind.THINK, toggle="enable_thinking"))
    qtbot.addWidget(qwen)
    assert qwen.thinking is not None and qwen.thinking.currentText().startswith("On")
    qwen.thinking.setCurrentIndex(1)
    assert qwen.values()[2].thinking is False
    oss = ConversationSettingsDialog(conv, [("m", "m")], reasoning=ReasoningFormat(
        ReasoningKind.HARMONY, efforts=("low", "medium", "high")))
    qtbot.addWidget(oss)
    assert oss.thinking is not None and oss.thinking.currentText() == "Medium effort"
    oss.thinking.setCurrentIndex(2)
    assert oss.values()[2].reasoning_effort == "high"
    r1 = ConversationSettingsDialog(conv, [("m", "m")], reasoning=ReasoningFormat(ReasoningKind.THINK,
                                                                                  starts_inside=True))
    qtbot.addWidget(r1)
    assert r1.thinking is None and r1.values()[2].thinking is True


def test_thinking_off_renders_the_template_s_closed_block_and_the_reply_is_all_answer(
        reasoning_window: MainWindow) -> None:
    engine = reasoning_window.ctx.engine
    assert isinstance(engine, EngineClient)
    service = reasoning_window.controller.service
    off = service.template_kwargs(ChatSettings(thinking=False))
    assert off == {"enable_thinking": False}
    prompt = engine.tokenize(messages=[{"role": "user", "content": "Hi"}], template_kwargs=off)
    assert engine.detokenize(prompt).endswith("<think>\n\n</think>\n\n")
    result = engine.generate(tokens=prompt, template_kwargs=off, test_hooks={"force_text": ANSWER}).collect()
    assert result.text == ANSWER and result.reasoning == ""
