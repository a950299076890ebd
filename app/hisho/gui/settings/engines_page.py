"""Settings → Engines: the local engine plus any number of remote OpenAI-compatible servers (llama-server,
vLLM, SGLang, …): name, address, API key (stored like the Hugging Face token), TLS verification, whether to go
through the system proxy, and "Test connection" (server kind, version, models, round-trip time, the route).
docs/remote-engines.md.

Rules of use: GUI thread. Tests of a connection run on the ``remote`` lane; the list is saved at once on
"Save". The key field shows only whether a key is stored (its last four characters), never the key. The proxy
box follows the address as it is typed (off for a LAN address) until the user ticks or clears it.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from hisho.core.remote import endpoints as store
from hisho.core.remote.http import Endpoint
from hisho.core.remote.probe import ServerInfo, probe
from hisho.gui import ops
from hisho.gui.shell.protocols import HasState

NEW = "+ Add a remote engine"


class EnginesPage(QWidget):
    def __init__(self, window: HasState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.endpoints: list[Endpoint] = store.load_endpoints()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        title = QLabel("Engines")
        title.setObjectName("DialogTitle")
        intro = QLabel("Chats run on this computer. Add a bigger machine's llama-server, vLLM or SGLang to "
                       "choose its models in the chat header; each reply records which engine wrote it.")
        intro.setWordWrap(True)
        intro.setObjectName("Meta")
        self.list = QListWidget()
        self.list.setObjectName("EnginesList")
        self.list.setMaximumHeight(130)
        self.name = QLineEdit()
        self.name.setPlaceholderText("workstation")
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://workstation:8080")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.verify = QCheckBox("Verify the server's TLS certificate (https)")
        self.verify.setChecked(True)
        self.proxy = QCheckBox("Use the system proxy (HTTPS_PROXY; off for servers on this network)")
        self._proxy_set = False                  # the user chose; the box no longer follows the address
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Address", self.url)
        form.addRow("API key", self.key)
        form.addRow("", self.verify)
        form.addRow("", self.proxy)
        self.save_btn = QPushButton("Save")
        self.remove_btn = QPushButton("Remove")
        self.test_btn = QPushButton("Test connection")
        self.save_btn.setObjectName("Primary")
        buttons = QHBoxLayout()
        for b in (self.test_btn, self.remove_btn):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.save_btn)
        self.result = QLabel("")
        self.result.setObjectName("EngineTestResult")
        self.result.setWordWrap(True)
        self.form_box = QWidget()
        box = QVBoxLayout(self.form_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(form)
        box.addLayout(buttons)
        box.addWidget(self.result)
        for w in (title, intro, self.list, self.form_box):
            lay.addWidget(w)
        lay.addStretch(1)
        self.list.currentRowChanged.connect(self._show)
        self.save_btn.clicked.connect(self.save)
        self.remove_btn.clicked.connect(self.remove)
        self.test_btn.clicked.connect(self.test)
        self.url.textEdited.connect(self._follow_address)
        self.proxy.clicked.connect(self._chose_proxy)
        self._fill(0)
        window.state.changed.connect(self._label_rows)   # a switch or a connect renames the rows at once

    # ----- list ----------------------------------------------------------------------------------------

    def _fill(self, row: int) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for _ in range(len(self.endpoints) + 1):
            self.list.addItem("")
        self._label_rows()
        self.list.addItem(NEW)
        self.list.blockSignals(False)
        self.list.setCurrentRow(row)
        self._show(row)

    def _label_rows(self, *_: object) -> None:
        """Each engine's row, naming the model that answers where it answers (the app's one state)."""
        now = self.w.state.now
        local = "not answering" if now.remote else (now.model.display or "no model")
        self.list.item(0).setText(f"Local — this computer ({local})")
        for i, ep in enumerate(self.endpoints, start=1):
            answering = f" · answering: {now.model.id}" if now.engine == ep.name else ""
            self.list.item(i).setText(f"{ep.name} — {ep.root}{answering}")

    def _selected(self) -> Endpoint | None:
        row = self.list.currentRow()
        return self.endpoints[row - 1] if 1 <= row <= len(self.endpoints) else None

    def _show(self, row: int) -> None:
        self.result.setText("")
        local = row == 0
        self.form_box.setEnabled(not local)
        ep = self._selected()
        self.name.setText(ep.name if ep else "")
        self.url.setText(ep.base_url if ep else "")
        self.verify.setChecked(ep.verify_tls if ep else True)
        self._proxy_set = ep is not None and ep.use_proxy is not None
        self.proxy.setChecked(ep.proxied if ep else False)
        self.key.clear()
        stored = store.get_key(ep.name) if ep else ""
        self.key.setPlaceholderText(f"stored ({store.masked(stored)}); type to replace" if stored
                                    else "none (leave empty for servers without one)")
        self.remove_btn.setEnabled(ep is not None)
        if local:
            self.result.setText("The built-in engine: models on this computer (Settings → Performance).")

    # ----- actions -------------------------------------------------------------------------------------

    def _follow_address(self, url: str) -> None:
        if not self._proxy_set:
            self.proxy.setChecked(Endpoint("", url).proxied)

    def _chose_proxy(self) -> None:
        self._proxy_set = True

    def _typed(self) -> Endpoint:
        ep = Endpoint(self.name.text().strip(), self.url.text().strip(), self.verify.isChecked())
        wanted = self.proxy.isChecked()
        return ep if wanted == ep.proxied else ep.with_(use_proxy=wanted)   # stored only when it differs

    def save(self) -> None:
        old = self._selected()
        ep = self._typed()
        problem = store.check(ep.name, ep.base_url, self.endpoints, replacing=old.name if old else None)
        if problem:
            self.result.setText(problem)
            return
        if old is not None:
            idx = self.endpoints.index(old)
            self.endpoints[idx] = ep
            if old.name != ep.name:
                store.set_key(ep.name, store.get_key(old.name))
                store.set_key(old.name, "")
        else:
            self.endpoints.append(ep)
            idx = len(self.endpoints) - 1
        if self.key.text().strip():
            store.set_key(ep.name, self.key.text())
        store.save_endpoints(self.endpoints)
        self._fill(idx + 1)
        self.result.setText(f"Saved {ep.name}.")

    def remove(self) -> None:
        ep = self._selected()
        if ep is None:
            return
        self.endpoints.remove(ep)
        store.set_key(ep.name, "")
        store.save_endpoints(self.endpoints)
        self._fill(0)

    def test(self) -> None:
        ep = self._typed()
        typed_key = self.key.text().strip()
        old = self._selected()
        key = typed_key or (store.get_key(old.name) if old else "")
        problem = store.check(ep.name or "test", ep.base_url, [])
        if problem:
            self.result.setText(problem)
            return
        self.result.setText(f"Testing {ep.root}…")
        self.test_btn.setEnabled(False)
        target = ep.with_(name=ep.name or "this engine", api_key=key)
        ops.remote(self.w.ctx.executor, lambda: probe(target)).success(self._tested) \
            .failure(lambda exc: self._tested(ServerInfo(error=str(exc)))).run()

    def _tested(self, info: ServerInfo) -> None:
        self.test_btn.setEnabled(True)
        self.result.setText(("✓ " if info.ok else "✗ ") + info.summary())
