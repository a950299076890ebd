"""Chat settings names the model that answers: a chat whose earlier replies came from another model shows the
loaded one in its Model row (Save keeps it; nothing switches) and says where the earlier replies came from."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from hisho.core.appstate import Now
from hisho.core.conversations.schema import Conversation
from hisho.core.models.names import ModelName
from hisho.gui.settings.settings_dialog import ConversationSettingsDialog

MODELS = [("smolthink-135m-q4_1", "smolthink-135m-q4_1  (100 MiB)"), ("smolr1-135m-q4_1", "smolr1-135m-q4_1  (100 MiB)")]


def dialog(qtbot: QtBot, conv_model: str, now: Now) -> ConversationSettingsDialog:
    d = ConversationSettingsDialog(Conversation(1, "A chat", model=conv_model), MODELS, answering=now)
    qtbot.addWidget(d)
    return d


def test_the_model_row_names_the_model_that_answers(qtbot: QtBot) -> None:
    now = Now(model=ModelName("smolr1-135m-q4_1", "smolr1-135m-q4_1"), path="/m/smolr1.gguf", loaded=True)
    d = dialog(qtbot, "smolthink-135m-q4_1", now)
    assert d.model.currentData() == "smolr1-135m-q4_1"
    assert d.values()[0] == "smolr1-135m-q4_1"      # Save as shown switches nothing
    assert "Answering now: smolr1-135m-q4_1" in d.answering.text()
    assert "Earlier replies in this chat came from smolthink-135m-q4_1" in d.answering.text()


def test_the_same_model_says_nothing_more(qtbot: QtBot) -> None:
    now = Now(model=ModelName("smolr1-135m-q4_1", "smolr1-135m-q4_1"), path="/m/smolr1.gguf", loaded=True)
    d = dialog(qtbot, "smolr1-135m-q4_1", now)
    assert d.model.currentData() == "smolr1-135m-q4_1" and "Earlier" not in d.answering.text()


def test_a_remote_engine_leaves_the_chat_model_in_the_row(qtbot: QtBot) -> None:
    now = Now(model=ModelName("qwen3:8b", "qwen3:8b"), engine="ollama", loaded=True)
    d = dialog(qtbot, "smolthink-135m-q4_1", now)
    assert d.model.currentData() == "smolthink-135m-q4_1"
