"""The message box's Tools control: how many tools the chat's model may call, and its menu (each server's state,
Tool settings…). A model whose template has no tool format says so instead.

Rules of use (GUI thread): ``ToolsButton(tools)`` follows ``ChatTools.states_changed``; the window calls
``update_label()`` when the model answering changes. Hidden while no server is configured and none runs.
"""

from __future__ import annotations

from PySide6.QtWidgets import QMenu, QToolButton

from hisho.gui.chat.tool_session import ChatTools


class ToolsButton(QToolButton):
    def __init__(self, tools: ChatTools) -> None:
        super().__init__()
        self.setObjectName("ToolsButton")
        self.tools = tools
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self.menu_.aboutToShow.connect(self._fill_menu)
        tools.states_changed.connect(self.update_label)
        self.update_label()

    def label(self) -> str:
        if not self.tools.running:
            return "Tools: off"
        if self.tools.unavailable() is not None:
            return "No tools: this model"
        n = self.tools.enabled_count()
        return f"Tools · {n}"

    def update_label(self, *_: object) -> None:
        self.setText(self.label())
        why = self.tools.unavailable() if self.tools.running else None
        self.setToolTip(why or "The tools this chat's model may call; each call asks you first.")
        self.setVisible(self.tools.running or bool(self.tools.states))

    def _fill_menu(self) -> None:
        self.menu_.clear()
        why = self.tools.unavailable() if self.tools.running else None
        if why:
            self.menu_.addAction(f"This model cannot call tools: {why}").setEnabled(False)
        for state in self.tools.states.values():
            self.menu_.addAction(state.describe()).setEnabled(False)
        for t in self.tools.tools():
            action = self.menu_.addAction(f"{t.qualified} ({t.server})")
            action.setCheckable(True)
            action.setChecked(t.enabled)
            action.setEnabled(False)
        self.menu_.addSeparator()
        self.menu_.addAction("Tool settings…", self.tools.settings_requested.emit)
