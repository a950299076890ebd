"""Settings → "System prompts": named presets (create, edit, rename, delete) and the system prompt new chats
start with. A chat picks a preset in its Chat settings (``hisho.gui.settings.settings_dialog``); changing a preset here
does not change chats that already use its text (a chat keeps its own copy, like its other settings).

Rules of use: GUI thread only. The values live in the ``system_prompt_presets`` and ``default_system_prompt``
settings (``hisho.core.settings``, which checks names: non-empty, unique ignoring case); every change is saved
at once on the executor's ``store`` lane. A refused change (a duplicate name) is said under the form and
changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from hisho.core import settings as settings_mod
from hisho.gui import ops
from hisho.gui.shell.protocols import HasContext

log = logging.getLogger("hisho.gui")

SAVE_MS = 500   # the default prompt box saves this long after the last keystroke


def presets(settings: settings_mod.Settings) -> list[dict[str, str]]:
    """The presets, in the user's order (copies: change them through ``set_presets``)."""
    return [dict(p) for p in settings["system_prompt_presets"]]


def preset_named(settings: settings_mod.Settings, name: str) -> dict[str, str] | None:
    return next((p for p in presets(settings) if p["name"].casefold() == name.casefold()), None)


class PromptsPage(QWidget):
    """The page. ``window`` gives ``ctx.settings`` and ``ctx.executor``."""

    def __init__(self, window: HasContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.settings: settings_mod.Settings = window.ctx.settings
        title = QLabel("System prompts")
        title.setObjectName("DialogTitle")
        intro = QLabel("A system prompt tells the model how to answer (tone, language, role). Save the ones you "
                       "use as presets and pick one per chat in Chat settings.")
        intro.setWordWrap(True)
        intro.setObjectName("Meta")
        self.list = QListWidget()
        self.list.setObjectName("PresetList")
        self.list.currentRowChanged.connect(self._show_row)
        self.name = QLineEdit()
        self.name.setPlaceholderText("Preset name, e.g. Concise English")
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("You are a concise assistant. Answer in English.")
        self.new_button = QPushButton("New")
        self.new_button.clicked.connect(self.new)
        self.save_button = QPushButton("Save preset")
        self.save_button.setObjectName("Primary")
        self.save_button.clicked.connect(self.save)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.delete)
        self.message = QLabel("")
        self.message.setObjectName("Meta")
        self.message.setWordWrap(True)
        self.default = QPlainTextEdit(self.settings["default_system_prompt"])
        self.default.setObjectName("DefaultSystemPrompt")
        self.default.setPlaceholderText("None: new chats start without a system prompt")
        self.default.setFixedHeight(70)
        self._default_timer = QTimer(self)
        self._default_timer.setSingleShot(True)
        self._default_timer.setInterval(SAVE_MS)
        self._default_timer.timeout.connect(self.save_default)
        self.default.textChanged.connect(self._default_timer.start)
        self.use_as_default = QPushButton("Use for new chats")
        self.use_as_default.setToolTip("New chats start with this preset's text as their system prompt")
        self.use_as_default.clicked.connect(self.make_default)

        editor = QVBoxLayout()
        editor.addWidget(self.name)
        editor.addWidget(self.prompt, 1)
        # Two rows of buttons: in a 700 px window one row squeezed each button to a few letters.
        buttons, more = QHBoxLayout(), QHBoxLayout()
        for b in (self.new_button, self.save_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        more.addWidget(self.use_as_default)
        more.addStretch(1)
        more.addWidget(self.delete_button)
        editor.addLayout(buttons)
        editor.addLayout(more)
        body = QHBoxLayout()
        self.list.setFixedWidth(160)
        body.addWidget(self.list)
        body.addLayout(editor, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        lay.addWidget(title)
        lay.addWidget(intro)
        lay.addLayout(body, 1)
        lay.addWidget(self.message)
        default_label = QLabel("New chats start with this system prompt")
        lay.addWidget(default_label)
        lay.addWidget(self.default)
        self.reload()

    # ----- the list --------------------------------------------------------------------------------------

    def reload(self, select: str = "") -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for p in presets(self.settings):
            self.list.addItem(p["name"])
        self.list.blockSignals(False)
        names = [p["name"] for p in presets(self.settings)]
        row = names.index(select) if select in names else (0 if names else -1)
        self.list.setCurrentRow(row)
        self._show_row(row)

    def _show_row(self, row: int) -> None:
        items = presets(self.settings)
        chosen = items[row] if 0 <= row < len(items) else {"name": "", "prompt": ""}
        self.name.setText(chosen["name"])
        self.prompt.setPlainText(chosen["prompt"])
        self.delete_button.setEnabled(row >= 0)
        self.use_as_default.setEnabled(row >= 0)

    def selected_name(self) -> str:
        item = self.list.currentItem()
        return item.text() if item is not None else ""

    # ----- changes ---------------------------------------------------------------------------------------

    def new(self) -> None:
        self.list.setCurrentRow(-1)
        self.list.clearSelection()
        self._show_row(-1)
        self.name.setFocus()

    def save(self) -> bool:
        """Save the form: a new preset, or the selected one (its name may change). False if refused."""
        name, text = self.name.text(), self.prompt.toPlainText()
        items = presets(self.settings)
        old = self.selected_name()
        entry = {"name": name, "prompt": text}
        index = next((i for i, p in enumerate(items) if p["name"] == old), None) if old else None
        if index is None:
            items.append(entry)
        else:
            items[index] = entry
        if not self._store(items):
            return False
        saved = self.settings["system_prompt_presets"]
        self.reload(select=saved[index if index is not None else -1]["name"])
        self.message.setText(f"Saved “{self.selected_name()}”.")
        return True

    def delete(self) -> None:
        old = self.selected_name()
        if not old:
            return
        if self._store([p for p in presets(self.settings) if p["name"] != old]):
            self.reload()
            self.message.setText(f"Deleted “{old}”. Chats that use its text keep it.")

    def make_default(self) -> None:
        chosen = preset_named(self.settings, self.selected_name())
        if chosen is not None:
            self.default.setPlainText(chosen["prompt"])
            self.save_default()
            self.message.setText(f"New chats start with “{chosen['name']}”.")

    def save_default(self) -> None:
        self._default_timer.stop()
        text = self.default.toPlainText().strip()
        if text != self.settings["default_system_prompt"]:
            self.settings.set("default_system_prompt", text)
            self._save_file()

    def _store(self, items: list[dict[str, str]]) -> bool:
        try:
            self.settings.set("system_prompt_presets", items)
        except ValueError as exc:
            why = str(exc).split(": ", 1)[-1]
            self.message.setText(why[:1].upper() + why[1:] + ".")
            return False
        self._save_file()
        return True

    def _save_file(self) -> None:
        ops.save_settings(self.w.ctx.executor, self.settings).failure(self._failed).run()

    def _failed(self, exc: BaseException) -> None:
        log.warning("could not save the system prompt settings: %s", exc)
        self.message.setText(f"Could not save the settings: {exc}")

    def hideEvent(self, event: Any) -> None:  # noqa: N802 - Qt naming
        if self._default_timer.isActive():
            self.save_default()  # typed just before the page closed
        super().hideEvent(event)

