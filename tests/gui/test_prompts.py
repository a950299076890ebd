"""System-prompt presets (issue 11, point 9): created, edited, renamed and deleted in Settings → System prompts,
picked per chat in Chat settings, and an app-wide default that new chats start with."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from hisho.core import paths
from hisho.gui.settings.preferences import open_preferences
from hisho.gui.settings.prompts_page import PromptsPage
from hisho.gui.settings.settings_dialog import ConversationSettingsDialog
from tests.gui.conftest import make_window, wait_for, wait_idle


def stored() -> dict[str, object]:
    path = paths.settings_path()
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def saved_presets() -> list[dict[str, str]]:
    return list(stored().get("system_prompt_presets", []))  # type: ignore[call-overload]


def in_chat_settings(act: object) -> None:
    """Run ``act(dialog)`` on the Chat settings dialog once it is open."""
    def find() -> None:
        for top in QApplication.topLevelWidgets():
            if isinstance(top, ConversationSettingsDialog) and top.isVisible():
                act(top)  # type: ignore[operator]
                return
        QTimer.singleShot(50, find)
    QTimer.singleShot(50, find)


def test_presets_are_managed_picked_per_chat_and_the_default_starts_new_chats(
        qtbot: QtBot, default_model_path: Path) -> None:
    w = make_window(qtbot)
    dialog = open_preferences(w)
    page = dialog.findChild(PromptsPage)
    assert page is not None

    # Create two presets, then edit (and rename) one and delete the other: the settings file follows.
    page.new()
    page.name.setText("Concise")
    page.prompt.setPlainText("Answer in one sentence.")
    assert page.save()
    page.new()
    page.name.setText("Pirate")
    page.prompt.setPlainText("Talk like a pirate.")
    assert page.save()
    wait_for(qtbot, lambda: len(saved_presets()) == 2, 10_000)
    page.new()
    page.name.setText("concise")           # a duplicate name (ignoring case) is refused and changes nothing
    page.prompt.setPlainText("other")
    assert not page.save()
    assert "already a preset named" in page.message.text()
    page.list.setCurrentRow(0)
    page.name.setText("Brief")
    page.prompt.setPlainText("Answer in one short sentence.")
    assert page.save()
    page.list.setCurrentRow(1)
    assert page.selected_name() == "Pirate"
    page.delete()
    wait_for(qtbot, lambda: saved_presets() == [{"name": "Brief", "prompt": "Answer in one short sentence."}],
             10_000)
    assert [page.list.item(i).text() for i in range(page.list.count())] == ["Brief"]

    # "Use for new chats" makes it the default; the next new chat starts with it.
    page.list.setCurrentRow(0)
    page.make_default()
    wait_for(qtbot, lambda: stored().get("default_system_prompt") == "Answer in one short sentence.", 10_000)
    dialog.close()
    before = w.controller.current.id if w.controller.current is not None else None
    w.controller.listing.new_chat()
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id != before, 30_000)
    assert w.controller.current is not None
    new_id = w.controller.current.id
    assert w.ctx.store.get(new_id).system_prompt == "Answer in one short sentence."

    # Chat settings: the preset in use is shown; picking "Custom" text and "Save as preset…" adds a preset;
    # Save stores the chat's new system prompt.
    seen: list[str] = []

    def act(d: ConversationSettingsDialog) -> None:
        seen.append(d.preset.currentText())
        d.system.setPlainText("Answer in French.")
        seen.append(d.preset.currentText())
        assert "already a preset" in d.add_preset("BRIEF")
        assert d.add_preset("French") == ""
        assert d.choose_preset("Brief") and d.system.toPlainText() == "Answer in one short sentence."
        assert d.choose_preset("French")
        d.accept()

    in_chat_settings(act)
    w.controller.open_settings()
    assert seen == ["Brief", "Custom"]
    wait_idle(qtbot, w, 30_000)
    wait_for(qtbot, lambda: [p["name"] for p in saved_presets()] == ["Brief", "French"], 10_000)
    assert w.ctx.store.get(new_id).system_prompt == "Answer in French."

    # Cancel changes nothing in the chat.
    in_chat_settings(lambda d: (d.choose_preset("Brief"), d.reject()))
    w.controller.open_settings()
    wait_idle(qtbot, w, 30_000)
    assert w.ctx.store.get(new_id).system_prompt == "Answer in French."
    w.close()
