"""Settings → Tools: the MCP servers a chat's model may call (docs/tools.md).

Two tabs. **Servers**: the list with each server's state (starting, ready with N tools, failed with the server's
own message and the tail of its stderr), a form to add or change one (local: command, arguments, environment,
working folder; remote: URL and bearer token), Remove, Test (starts the form's server apart, lists its tools,
stops it), Import mcp.json… and Export…. **Tools and approvals**: each running server's tools with a switch
each, the tools allowed always (Revoke), and the bounds of a reply (calls per message, time per call).

Rules of use: GUI thread. The servers run under the window's ``ChatTools`` (found as the window's child); a
changed list is saved to ``mcp.json`` and started again through it. Waits on servers go through ops. A bearer
token is never shown: the field says only whether one is stored.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from hisho.core.errors import UserError
from hisho.core.tools import config as tool_config
from hisho.core.tools.manager import FAILED, READY, ServerState, ToolManager
from hisho.gui import ops
from hisho.gui.chat.tool_session import ChatTools
from hisho.gui.settings.settings_page import page_layout
from hisho.gui.shell.protocols import HasContext

log = logging.getLogger("hisho.gui")

NEW = "+ Add a server"
LOCAL, REMOTE = "Local program (stdio)", "Remote server (HTTP)"


def _scrolled(widget: QWidget) -> QScrollArea:
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    area.setWidget(widget)
    return area


def state_text(state: ServerState | None) -> str:
    if state is None:
        return "not started"
    if state.status == READY:
        return f"ready, {state.tools} tool" + ("" if state.tools == 1 else "s")
    if state.status == FAILED:
        return f"failed: {state.message}"
    return state.status


class ToolsPage(QWidget):
    def __init__(self, window: HasContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        found = window.window().findChild(ChatTools) if hasattr(window, "window") else None
        self.tools = found if isinstance(found, ChatTools) else None
        self.servers: list[tool_config.ServerConfig] = self._configs()
        lay = page_layout(self, "Tools", "Programs and servers (MCP) whose tools a chat's model may call. You "
                                         "approve each call; the model sees only the tools switched on.")
        self.tabs = QTabWidget()
        self.tabs.addTab(_scrolled(self._servers_tab()), "Servers")
        self.tabs.addTab(_scrolled(self._tools_tab()), "Tools and approvals")
        lay.addWidget(self.tabs, 1)
        if self.tools is not None:
            self.tools.states_changed.connect(self.refresh)
        self._fill(0)
        self.refresh()

    # ----- building ---------------------------------------------------------------------------------------

    def _servers_tab(self) -> QWidget:
        tab = QWidget()
        lay = QVBoxLayout(tab)
        self.list = QListWidget()
        self.list.setObjectName("ToolServers")
        self.list.setMaximumHeight(84)
        self.kind = QComboBox()
        self.kind.addItems([LOCAL, REMOTE])
        self.name = QLineEdit()
        self.name.setPlaceholderText("files")
        self.command = QLineEdit()
        self.command.setPlaceholderText("npx")
        self.args = QLineEdit()
        self.args.setPlaceholderText("-y @modelcontextprotocol/server-filesystem ~/Documents")
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("KEY=value, one a line")
        self.env.setMaximumHeight(48)
        self.cwd = QLineEdit()
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://mcp.example.com/mcp")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.form = QFormLayout()
        for label, field in (("Kind", self.kind), ("Name", self.name), ("Command", self.command),
                             ("Arguments", self.args), ("Environment", self.env), ("Working folder", self.cwd),
                             ("URL", self.url), ("Bearer token", self.token)):
            self.form.addRow(label, field)
        self.save_btn = QPushButton("Add")
        self.save_btn.setObjectName("Primary")
        self.remove_btn = QPushButton("Remove")
        self.test_btn = QPushButton("Test")
        self.import_btn = QPushButton("Import mcp.json…")
        self.export_btn = QPushButton("Export…")
        files = QHBoxLayout()   # the whole list: beside it, so the form's buttons fit a narrow window
        files.addWidget(self.import_btn)
        files.addWidget(self.export_btn)
        files.addStretch(1)
        buttons = QHBoxLayout()
        for b in (self.test_btn, self.remove_btn):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.save_btn)
        self.state = QLabel("")
        self.state.setObjectName("ToolServerState")
        self.state.setWordWrap(True)
        self.state.setTextFormat(Qt.TextFormat.PlainText)
        self.stderr = QPlainTextEdit()
        self.stderr.setObjectName("ToolServerStderr")
        self.stderr.setReadOnly(True)
        self.stderr.setMaximumHeight(90)
        self.stderr.hide()
        lay.addWidget(self.list)
        lay.addLayout(files)
        lay.addLayout(self.form)
        lay.addLayout(buttons)
        lay.addWidget(self.state)
        lay.addWidget(self.stderr)
        lay.addStretch(1)
        self.list.currentRowChanged.connect(self._show)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.save_btn.clicked.connect(self.save)
        self.remove_btn.clicked.connect(self.remove)
        self.test_btn.clicked.connect(self.test)
        self.import_btn.clicked.connect(self._import_dialog)
        self.export_btn.clicked.connect(self._export_dialog)
        return tab

    def _tools_tab(self) -> QWidget:
        tab = QWidget()
        lay = QVBoxLayout(tab)
        lay.addWidget(QLabel("Tools the model may call (running servers):"))
        self.tool_list = QListWidget()
        self.tool_list.setObjectName("ToolSwitches")
        self.tool_list.setMinimumHeight(110)
        self.tool_list.itemChanged.connect(self._tool_switched)
        lay.addWidget(self.tool_list, 1)
        lay.addWidget(QLabel("Allowed always (calls of these run without asking):"))
        self.allowed = QListWidget()
        self.allowed.setObjectName("ToolsAllowed")
        self.allowed.setMaximumHeight(90)
        self.revoke_btn = QPushButton("Revoke")
        self.revoke_btn.clicked.connect(self.revoke)
        lay.addWidget(self.allowed)
        lay.addWidget(self.revoke_btn, 0, Qt.AlignmentFlag.AlignLeft)
        settings = self.w.ctx.settings
        self.max_calls = QSpinBox()
        self.max_calls.setRange(1, 100)
        self.max_calls.setValue(int(settings.get("tool_calls_per_message")))
        self.max_calls.setSuffix(" calls")
        self.timeout = QSpinBox()
        self.timeout.setRange(1, 3600)
        self.timeout.setValue(int(settings.get("tool_timeout_s")))
        self.timeout.setSuffix(" s")
        for spin in (self.max_calls, self.timeout):
            spin.setMaximumWidth(140)
        form = QFormLayout()
        form.addRow("Tool calls per message", self.max_calls)
        form.addRow("Time limit per call", self.timeout)
        lay.addLayout(form)
        self.max_calls.valueChanged.connect(self._limits)
        self.timeout.valueChanged.connect(self._limits)
        return tab

    # ----- the server list --------------------------------------------------------------------------------

    def _configs(self) -> list[tool_config.ServerConfig]:
        loop = self.w.ctx.tools
        return loop.manager.configs if loop is not None else tool_config.load_servers()

    def _fill(self, row: int) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for _ in self.servers:
            self.list.addItem("")
        self.list.addItem(NEW)
        self.list.blockSignals(False)
        self._label_rows()
        self.list.setCurrentRow(min(row, self.list.count() - 1))
        self._show(self.list.currentRow())

    def _label_rows(self) -> None:
        states = self.tools.states if self.tools is not None else {}
        for i, s in enumerate(self.servers):
            shown = state_text(states.get(s.name)) if s.enabled else "turned off"
            self.list.item(i).setText(f"{s.name} — {shown}")

    def selected(self) -> tool_config.ServerConfig | None:
        row = self.list.currentRow()
        return self.servers[row] if 0 <= row < len(self.servers) else None

    def _show(self, _row: int) -> None:
        cfg = self.selected()
        self.kind.setCurrentIndex(1 if cfg is not None and cfg.remote else 0)
        self.name.setText(cfg.name if cfg else "")
        self.command.setText(cfg.command if cfg else "")
        self.args.setText(shlex.join(cfg.args) if cfg else "")
        self.env.setPlainText("\n".join(f"{k}={v}" for k, v in cfg.env.items()) if cfg else "")
        self.cwd.setText(cfg.cwd if cfg else "")
        self.url.setText(cfg.url if cfg else "")
        self.token.clear()
        stored = cfg is not None and cfg.remote and bool(tool_config.get_token(cfg.name))
        self.token.setPlaceholderText("stored (type to replace)" if stored else "none")
        self.save_btn.setText("Save" if cfg else "Add")
        self.remove_btn.setEnabled(cfg is not None)
        self._kind_changed()
        self._show_state()

    def _show_state(self) -> None:
        cfg = self.selected()
        state = self.tools.states.get(cfg.name) if self.tools is not None and cfg is not None else None
        self.state.setText(f"{cfg.name}: {state_text(state)}" if cfg is not None else "")
        tail = state.stderr if state is not None and state.status == FAILED else ""
        self.stderr.setPlainText(tail)
        self.stderr.setVisible(bool(tail))

    def _kind_changed(self, *_: object) -> None:
        remote = self.kind.currentIndex() == 1
        for field in (self.command, self.args, self.env, self.cwd):
            self.form.setRowVisible(field, not remote)
        for field in (self.url, self.token):
            self.form.setRowVisible(field, remote)

    def refresh(self) -> None:
        """Follow the servers' states and tools (``ChatTools.states_changed``)."""
        self._label_rows()
        self._show_state()
        self._fill_tools()
        self._fill_allowed()

    def form_config(self) -> tool_config.ServerConfig:
        """The form as a server (``UserError`` saying what is wrong)."""
        env: dict[str, str] = {}
        for line in self.env.toPlainText().splitlines():
            if line.strip():
                key, eq, value = line.partition("=")
                if not eq or not key.strip():
                    raise UserError(f"Environment: {line.strip()!r} is not KEY=value")
                env[key.strip()] = value
        old = self.selected()
        try:
            args = tuple(shlex.split(self.args.text()))
        except ValueError as exc:
            raise UserError(f"Arguments: {exc}") from None
        if self.kind.currentIndex() == 1:
            cfg = tool_config.ServerConfig(self.name.text().strip(), url=self.url.text().strip(),
                                           token=self.token.text().strip(),
                                           headers=dict(old.headers) if old else {})
        else:
            cfg = tool_config.ServerConfig(self.name.text().strip(), command=self.command.text().strip(),
                                           args=args, env=env, cwd=self.cwd.text().strip())
        if old is not None:
            cfg = replace(cfg, enabled=old.enabled, disabled_tools=old.disabled_tools)
        return tool_config.check(cfg)

    def _say(self, text: str) -> None:
        self.state.setText(text)

    def save(self) -> None:
        try:
            cfg = self.form_config()
        except UserError as exc:
            self._say(str(exc))
            return
        row = self.list.currentRow()
        old = self.selected()
        names = {s.name for s in self.servers if s is not old}
        if cfg.name in names:
            self._say(f"There is already a server named {cfg.name!r}.")
            return
        if old is not None:
            self.servers[row] = cfg
        else:
            self.servers.append(cfg)
            row = len(self.servers) - 1
        self._apply(row)

    def remove(self) -> None:
        cfg = self.selected()
        if cfg is None:
            return
        self.servers = [s for s in self.servers if s is not cfg]
        if cfg.remote:
            tool_config.set_token(cfg.name, "")
        self._apply(self.list.currentRow())

    def _apply(self, row: int) -> None:
        """Save the list and run it (through the window's tools)."""
        if self.tools is not None:
            self.tools.restart(self.servers)
        else:
            try:
                tool_config.save_servers(self.servers)
            except UserError as exc:
                self._say(str(exc))
        self.servers = [replace(s, token="") for s in self.servers]
        self._fill(row)

    def test(self) -> None:
        try:
            cfg = self.form_config()
        except UserError as exc:
            self._say(str(exc))
            return
        self._say(f"Testing {cfg.name}…")
        self.test_btn.setEnabled(False)

        def probe() -> ServerState:
            manager = ToolManager([])
            try:
                return manager.test(cfg)
            finally:
                manager.close()

        def shown(state: ServerState) -> None:
            self.test_btn.setEnabled(True)
            self._say(f"Test of {cfg.name}: {state_text(state)}")
            self.stderr.setPlainText(state.stderr if state.status == FAILED else "")
            self.stderr.setVisible(state.status == FAILED and bool(state.stderr))

        def failed(exc: BaseException) -> None:
            self.test_btn.setEnabled(True)
            self._say(f"Test of {cfg.name} failed: {exc}")

        ops.tool_servers(self.w.ctx.executor, probe).success(shown).failure(failed).run()

    # ----- import and export ------------------------------------------------------------------------------

    def _import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", str(Path.home()), "mcp.json (*.json)")
        if path:
            self.import_path(Path(path))

    def import_path(self, path: Path) -> bool:
        """Add the servers of an mcp.json file (one with a name in use replaces it); False and a message when the
        file is wrong (nothing imported)."""
        try:
            imported = tool_config.import_file(path)
        except UserError as exc:
            self._say(str(exc))
            return False
        self.servers = tool_config.merge(self.servers, imported)
        self._apply(len(self.servers) - len(imported))
        self._say(f"Imported {len(imported)} server" + ("" if len(imported) == 1 else "s") + f" from {path.name}.")
        return True

    def _export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export MCP servers", str(Path.home() / "mcp.json"),
                                              "mcp.json (*.json)")
        if path:
            self.export_path(Path(path))

    def export_path(self, path: Path) -> None:
        """Write the servers as mcp.json (no tokens)."""
        try:
            tool_config.export_file(self.servers, path)
        except OSError as exc:
            self._say(f"Cannot write {path}: {exc}")
            return
        self._say(f"Exported {len(self.servers)} servers to {path} (bearer tokens left out).")

    # ----- tools, approvals, bounds -----------------------------------------------------------------------

    def _fill_tools(self) -> None:
        self.tool_list.blockSignals(True)
        self.tool_list.clear()
        tools = self.tools.tools() if self.tools is not None else []
        for t in tools:
            words = f"{t.qualified} ({t.server})" + (f" — {t.description.splitlines()[0]}" if t.description else "")
            item = QListWidgetItem(words)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if t.enabled else Qt.CheckState.Unchecked)
            item.setData(Qt.ItemDataRole.UserRole, t.qualified)
            self.tool_list.addItem(item)
        if not tools:
            self.tool_list.addItem("No server is running: add one on the Servers tab.")
        self.tool_list.blockSignals(False)

    def _tool_switched(self, item: QListWidgetItem) -> None:
        loop = self.w.ctx.tools
        qualified = item.data(Qt.ItemDataRole.UserRole)
        if loop is None or not qualified:
            return
        on = item.checkState() == Qt.CheckState.Checked
        changed = loop.manager.set_enabled(str(qualified), on)
        self.servers = [changed if s.name == changed.name else s for s in self.servers]
        configs = loop.manager.configs
        ops.tool_servers(self.w.ctx.executor, lambda: tool_config.save_servers(configs)).run()

    def _fill_allowed(self) -> None:
        self.allowed.clear()
        loop = self.w.ctx.tools
        keys = loop.approvals.keys() if loop is not None else list(self.w.ctx.settings.get("tools_always_allowed"))
        self.allowed.addItems(keys)
        self.revoke_btn.setEnabled(bool(keys))

    def revoke(self) -> None:
        item = self.allowed.currentItem() or self.allowed.item(0)
        if item is None:
            return
        key = item.text()
        loop = self.w.ctx.tools
        if loop is not None:
            loop.approvals.revoke(key)   # saved with the settings through the loop's listener
        else:
            settings = self.w.ctx.settings
            settings.set("tools_always_allowed", [k for k in settings.get("tools_always_allowed") if k != key])
            ops.save_settings(self.w.ctx.executor, settings).run()
        self._fill_allowed()

    def _limits(self) -> None:
        settings = self.w.ctx.settings
        settings.set("tool_calls_per_message", self.max_calls.value())
        settings.set("tool_timeout_s", self.timeout.value())
        loop = self.w.ctx.tools
        if loop is not None:
            loop.max_calls, loop.timeout = self.max_calls.value(), float(self.timeout.value())
        ops.save_settings(self.w.ctx.executor, settings).run()
