"""Settings → API: the local OpenAI-compatible API served from the window's own engine (off by default).

The switch starts ``hisho.api``'s server on 127.0.0.1 (the ``api_port`` setting) over the window's services
(``hisho.api.launch.api_server``, the one way a server is made; it follows a model switch or a remote
connect): API requests and the window's chats share the one loaded model (a request joins the engine's serving batch; a chat
sent meanwhile runs when the batch is empty). The key is shown and can be regenerated; CORS is off unless
origins are listed. The limits on what one request may cost (docs/api.md) are set here too; a change restarts
a running server. A label in the status bar says when API requests are running.

Rules of use: GUI thread only. The composition root owns the server's lifetime (``Services.serve`` /
``stop_serving``; ``Services.close`` stops it before the engine), not the page or the window, so it keeps
serving after the page closes and stops at exit whatever closed the app; ``serving(window)`` is the one
running. ``ApiServer.start`` waits (≤ 10 s, usually ~50 ms) for uvicorn to listen.
"""

from __future__ import annotations

import logging

from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from hisho.api import keys
from hisho.api.launch import api_server, origins
from hisho.api.server import ApiServer
from hisho.core import settings as settings_mod
from hisho.core.errors import UserError
from hisho.gui import ops
from hisho.gui.settings.api_clients import ConnectTab, RequestsTab
from hisho.gui.shell.protocols import ApiWindow, HasContext

log = logging.getLogger("hisho.gui")

# (setting, label, suffix): what one API request may cost (docs/api.md).
LIMITS = (
    ("api_max_body_mb", "Largest request", " MiB"),
    ("api_max_prompt_tokens", "Longest prompt", " tokens"),
    ("api_request_timeout_s", "Time limit per request", " s"),
    ("api_max_queued", "Requests waiting per key", ""),
    ("api_max_wait_s", "Longest wait behind other work", " s"),
)


def serving(window: HasContext) -> ApiServer | None:
    """The API server running over the window's services, if any."""
    server = window.ctx.served
    return server if isinstance(server, ApiServer) else None


def start_api(window: ApiWindow) -> ApiServer:
    """Serve the API from the window's engine (replacing a running server). Raises UserError (port taken)."""
    stop_api(window)
    server = api_server(window.ctx, keys.api_key(), port=int(window.ctx.settings["api_port"]))
    window.ctx.serve(server)  # its requests show in the status bar's queue (AppState), as /health counts them
    return server


def start_at_launch(window: ApiWindow) -> None:
    """The window just opened: serve if the setting says so; a taken port is logged, never fatal."""
    if not window.ctx.settings["api_enabled"] or window.ctx.model_path is None:
        return
    try:
        start_api(window)
    except Exception as exc:  # the window works without its API
        log.warning("API not started: %s", exc)


def stop_api(window: ApiWindow) -> None:
    window.ctx.stop_serving()


class ApiPage(QWidget):
    def __init__(self, window: ApiWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.settings = window.ctx.settings
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(12)
        title = QLabel("API")
        title.setObjectName("DialogTitle")
        intro = QLabel("Coding agents, editors and scripts that speak OpenAI's or Anthropic's API can use this "
                       "model through Hisho: they share the loaded model with your chats, and long prompts they "
                       "resend are kept on disk. Only programs on this computer can connect.")
        intro.setWordWrap(True)
        self.enabled = QCheckBox("Serve the API while Hisho is open")
        self.enabled.setChecked(serving(window) is not None)
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(int(self.settings["api_port"]))
        self.key = QLineEdit(keys.api_key())
        self.key.setReadOnly(True)
        self.key.setObjectName("ApiKey")
        regen = QPushButton("Regenerate")
        regen.setToolTip("Make a new key; programs using the old one must be given the new one")
        regen.clicked.connect(self.regenerate)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(regen)
        self.cors = QLineEdit(str(self.settings["api_cors_origins"]))
        self.cors.setPlaceholderText("none (e.g. http://localhost:3000)")
        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        form.addRow("Web origins (CORS)", self.cors)
        self.limits: dict[str, QSpinBox] = {}
        for name, label, suffix in LIMITS:
            box = QSpinBox()
            box.setObjectName(name)
            setting = settings_mod.declared(name)
            box.setRange(int(setting.minimum or 0), int(setting.maximum or 1 << 30))
            box.setValue(int(self.settings[name]))
            box.setSuffix(suffix)
            if name == "api_max_prompt_tokens":
                box.setSpecialValueText("the context")
            box.setToolTip(setting.doc)
            box.editingFinished.connect(self._restart)
            form.addRow(label, box)
            self.limits[name] = box
        self.status = QLabel()
        self.status.setObjectName("ApiStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(self.status.textInteractionFlags() | self.status.textInteractionFlags()
                                            .TextSelectableByMouse)
        server_tab = QWidget()
        server_lay = QVBoxLayout(server_tab)
        server_lay.setContentsMargins(0, 8, 0, 0)
        server_lay.addWidget(self.enabled)
        server_lay.addLayout(form)
        server_lay.addWidget(self.status)
        server_lay.addStretch(1)
        self.connect_tab = ConnectTab(lambda: serving(window), self.port.value, self.key.text,
                                      lambda: window.state.now.model.id or "hisho")
        self.requests_tab = RequestsTab(lambda: serving(window))
        self.tabs = QTabWidget()
        self.tabs.setObjectName("ApiTabs")
        self.tabs.addTab(server_tab, "Server")
        self.tabs.addTab(self.connect_tab, "Connect a client")
        self.tabs.addTab(self.requests_tab, "Requests")
        for w in (title, intro):
            lay.addWidget(w)
        lay.addWidget(self.tabs, 1)
        self.enabled.toggled.connect(self.apply)
        self.port.editingFinished.connect(self._restart)
        self.port.valueChanged.connect(lambda _v: self.connect_tab.refresh())
        self.cors.editingFinished.connect(self._restart)
        window.state.changed.connect(self._answering)   # the model it serves follows a switch
        self._show()

    def _answering(self, _now: object) -> None:
        self._show()

    def _save(self) -> None:
        self.settings.set("api_enabled", self.enabled.isChecked())
        self.settings.set("api_port", self.port.value())
        self.settings.set("api_cors_origins", ",".join(origins(self.cors.text())))
        for name, _, _ in LIMITS:
            self.settings.set(name, self.limits[name].value())
        values = self.settings
        ops.save_settings(self.w.ctx.executor, values).run()

    def apply(self) -> None:
        self._save()
        if not self.enabled.isChecked():
            stop_api(self.w)
        else:
            try:
                start_api(self.w)
            except UserError as exc:
                self.enabled.blockSignals(True)
                self.enabled.setChecked(False)
                self.enabled.blockSignals(False)
                self._save()
                self.status.setText(str(exc))
                return
        self._show()

    def _restart(self) -> None:
        if self.enabled.isChecked():
            self.apply()
        else:
            self._save()

    def regenerate(self) -> None:
        self.key.setText(keys.regenerate_key())
        self.connect_tab.refresh()
        if self.enabled.isChecked():
            self.apply()  # the running server checks the new key from now on

    def _show(self) -> None:
        server = serving(self.w)
        self.connect_tab.refresh()
        self.requests_tab.refresh()
        if server is None:
            self.status.setText("Off.")
        else:
            self.status.setText(f"Listening on {server.url} — model \"{server.backend.model_id}\". "
                                "Send the key as “Authorization: Bearer …” (Anthropic's clients: “x-api-key”). "
                                "“Connect a client” has the lines to paste.")
