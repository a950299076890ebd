"""Per-conversation settings: model, system prompt and sampling. Values are checked by the widgets' bounds,
so what comes back is always valid; Cancel changes nothing.

The system prompt can be picked from the user's presets (Settings → System prompts): choosing one copies its
text into the box (the chat keeps its own copy); the list shows "Custom" while the text matches no preset.
"Save as preset…" adds the box's text as a new preset; ``new_preset`` holds it and the caller saves it to the
settings whether the dialog is then saved or cancelled (naming a preset is its own action)."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from hisho.core.appstate import Now
from hisho.core.conversations.store import ChatSettings, Conversation
from hisho.core.formats.reasoning import ReasoningFormat
from hisho.core.settings import PRESET_NAME_MAX
from hisho.gui.shell.text_dialog import ask_text


class ConversationSettingsDialog(QDialog):
    def __init__(self, conv: Conversation, models: list[tuple[str, str]], parent: QWidget | None = None,
                 presets: list[dict[str, str]] | None = None, reasoning: ReasoningFormat | None = None,
                 answering: Now | None = None) -> None:
        """``models``: (store name, label) pairs. ``presets``: {"name", "prompt"}. ``reasoning``: how the model
        answering now reasons (a Thinking row where its template lets it be chosen). ``answering``: the app's
        state: a chat that names no model of its own shows the one answering, and the dialog says which
        answers."""
        super().__init__(parent)
        self.presets = list(presets or [])
        self.new_preset: dict[str, str] | None = None
        self.setWindowTitle("Chat settings")
        self.setMinimumWidth(520)
        s = conv.settings
        self.model = QComboBox()
        for name, label in models:
            self.model.addItem(label, name)
        now = answering or Now()
        local = "" if now.remote else now.model.id
        # The row shows the model that answers this chat's next message: the one loaded (a chat that named
        # another keeps its earlier replies' names, said below), so Save switches only when the row is changed.
        shown = local or conv.model
        index = self.model.findData(shown) if shown else 0
        self.model.setCurrentIndex(max(0, index))
        line = (f"Answering now: {now.model.display}" + (" (not loaded)" if not now.loaded else "")
                if now.model.id else "No model is loaded.")
        if conv.model and now.model.id and not now.model.accepts(conv.model):
            line += f". Earlier replies in this chat came from {conv.model}."
        self.answering = QLabel(line)
        self.answering.setWordWrap(True)
        self.answering.setObjectName("Meta")
        self.system = QPlainTextEdit(conv.system_prompt)
        self.system.setPlaceholderText("e.g. You are a concise assistant. Answer in English.")
        self.system.setFixedHeight(110)
        self.preset = QComboBox()
        self.preset.setObjectName("PresetChoice")
        self.preset.addItem("Custom", None)
        for p in self.presets:
            self.preset.addItem(p["name"], p["prompt"])
        self.preset.activated.connect(self._preset_chosen)
        self.system.textChanged.connect(self._match_preset)
        self.save_preset = QPushButton("Save as preset…")
        self.save_preset.setObjectName("Flat")
        self.save_preset.clicked.connect(self.ask_preset_name)
        self._match_preset()
        preset_row = QHBoxLayout()
        preset_row.setContentsMargins(0, 0, 0, 0)
        preset_row.addWidget(self.preset, 1)
        preset_row.addWidget(self.save_preset)
        self.temperature = self._double(s.temperature, 0.0, 2.0, 0.05, "0 = always the most likely word")
        self.top_p = self._double(s.top_p, 0.0, 1.0, 0.01, "Sample from the smallest set of words whose "
                                                             "probabilities add up to this")
        self.top_k = self._int(s.top_k, 0, 1000, "Only the k most likely words (0 = off)")
        self.repeat = self._double(s.repeat_penalty, 0.5, 3.0, 0.05, "Above 1 discourages repeating words")
        self.max_tokens = self._int(s.max_tokens, 1, 1 << 20, "Longest reply, in tokens")
        self.seed = self._int(s.seed, -1, 2**31 - 1, "-1 = random; any other value repeats replies")
        self.seed.setSpecialValueText("random")
        self.conv_settings = s
        self.thinking = self._thinking_choice(s, reasoning or ReasoningFormat())
        form = QFormLayout()
        form.setSpacing(10)
        form.addRow("Model", self.model)
        form.addRow("", self.answering)
        form.addRow("Preset", preset_row)
        form.addRow("System prompt", self.system)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Repeat penalty", self.repeat)
        form.addRow("Max reply tokens", self.max_tokens)
        if self.thinking is not None:
            form.addRow("Thinking", self.thinking)
        form.addRow("Seed", self.seed)
        note = QLabel("These settings belong to this chat. New chats start from the defaults.")
        note.setObjectName("Meta")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Save).setObjectName("Primary")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 18, 20, 16)
        lay.setSpacing(14)
        heading = QLabel("Chat settings")
        heading.setObjectName("DialogTitle")
        which = QLabel(conv.title)
        which.setObjectName("Meta")
        which.setWordWrap(True)
        lay.addWidget(heading)
        lay.addWidget(which)
        lay.addLayout(form)
        lay.addWidget(note)
        lay.addWidget(buttons)
        # Nothing here grows with the window; a fixed size also spares it the window manager's resize handle
        # (openbox draws it as a stray line along the bottom edge of resizable dialogs).
        self.setFixedSize(self.sizeHint().expandedTo(QSize(520, 0)))

    def _preset_chosen(self, index: int) -> None:
        text = self.preset.itemData(index)
        if isinstance(text, str):
            self.system.setPlainText(text)

    def _match_preset(self) -> None:
        """Show the preset whose text is in the box, or "Custom"."""
        text = self.system.toPlainText().strip()
        index = next((i for i in range(1, self.preset.count()) if self.preset.itemData(i) == text), 0)
        self.preset.setCurrentIndex(index)
        self.save_preset.setEnabled(index == 0 and bool(text))

    def choose_preset(self, name: str) -> bool:
        """Pick a preset by name (as the list does). False if there is none of that name."""
        index = self.preset.findText(name)
        if index <= 0:
            return False
        self.preset.setCurrentIndex(index)
        self._preset_chosen(index)
        return True

    def ask_preset_name(self) -> None:
        name = ask_text(self, "Save as preset", "Name for this system prompt:", max_length=PRESET_NAME_MAX)
        why = self.add_preset(name) if name else ""
        if why:
            QMessageBox.information(self, "Save as preset", why)

    def add_preset(self, name: str) -> str:
        """Keep the box's text as a new preset named ``name``; returns "" or why it was refused."""
        name = " ".join(name.split())
        if not name:
            return "A preset needs a name."
        if any(p["name"].casefold() == name.casefold() for p in self.presets):
            why = f"There is already a preset named “{name}”."
            return why
        self.new_preset = {"name": name, "prompt": self.system.toPlainText().strip()}
        self.presets.append(self.new_preset)
        self.preset.addItem(name, self.new_preset["prompt"])
        self._match_preset()
        return ""

    @staticmethod
    def _double(value: float, lo: float, hi: float, step: float, tip: str) -> QDoubleSpinBox:
        w = QDoubleSpinBox()
        w.setRange(lo, hi)
        w.setSingleStep(step)
        w.setDecimals(2)
        w.setValue(value)
        w.setToolTip(tip)
        return w

    @staticmethod
    def _int(value: int, lo: int, hi: int, tip: str) -> QSpinBox:
        w = QSpinBox()
        w.setRange(lo, hi)
        w.setValue(value)
        w.setToolTip(tip)
        return w

    @staticmethod
    def _thinking_choice(s: ChatSettings, fmt: ReasoningFormat) -> QComboBox | None:
        """On/off (a template with a thinking switch) or the effort (GPT-OSS); None for a model whose thinking
        cannot be chosen (it thinks, or not, as it was trained)."""
        if not fmt.toggle and not fmt.efforts:
            return None
        box = QComboBox()
        box.setObjectName("ThinkingChoice")
        if fmt.efforts:
            for effort in fmt.efforts:
                box.addItem(f"{effort.capitalize()} effort", (True, effort))
            box.setCurrentIndex(max(0, box.findText(f"{s.reasoning_effort.capitalize()} effort")))
            box.setToolTip("How long the model reasons before it answers (its own low/medium/high setting)")
        else:
            box.addItem("On: think before answering", (True, s.reasoning_effort))
            box.addItem("Off: answer at once", (False, s.reasoning_effort))
            box.setCurrentIndex(0 if s.thinking else 1)
            box.setToolTip("Thinking takes longer and often answers better; its text is folded above the answer")
        return box

    def values(self) -> tuple[str, str, ChatSettings]:
        """(model store name, system prompt, sampling settings)."""
        thinking, effort = (self.thinking.currentData() if self.thinking is not None
                            else (self.conv_settings.thinking, self.conv_settings.reasoning_effort))
        settings = ChatSettings(temperature=self.temperature.value(), top_p=self.top_p.value(),
                                top_k=self.top_k.value(), repeat_penalty=self.repeat.value(),
                                max_tokens=self.max_tokens.value(), seed=self.seed.value(),
                                thinking=bool(thinking), reasoning_effort=str(effort))
        return str(self.model.currentData() or ""), self.system.toPlainText().strip(), settings
