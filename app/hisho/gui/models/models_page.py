"""The Models page (View → Models, a page of the window): Installed, Hub and Downloads tabs.

- *Installed*: the model store with architecture, quant, size, trained context, source and a fit badge from the
  planner; Load, Set as default, Delete (says how much space comes back and which KV snapshots go with it:
  ``hisho.core.models.removal``), Reveal, Import… (copy or link); a
  ``.gguf`` dropped on the page is imported.
- *Hub*: ``hisho.gui.models.hub_tab``.
- *Downloads*: the queue with bytes, speed and ETA; Pause/Resume and Cancel on each row; a finished download stays
  as "Verified · Load now". Unfinished downloads from an earlier run are listed paused, ready to resume (the
  window offers them at start-up: ``offer_unfinished``). Hub files already installed (same sha256) say so.

Rules of use: hub requests run on the ``hub`` lane, downloads on the ``download`` lane (one at a time), store
reads and writes on the ``store`` lane. Download progress is posted through the bridge at most 10 times a second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QEvent, QObject, Qt, QUrl
from PySide6.QtGui import QColor, QDesktopServices, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from hisho.core.executor import Executor
from hisho.core.hub import Downloader, Job, QuantFile
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from hisho.core.models.names import entry_name
from hisho.core.models.projector import projector_for
from hisho.core.models.removal import Removal, plan_removal, remove_model
from hisho.core.models.store import ModelEntry, ModelStore, is_base_model
from hisho.core.units import format_bytes
from hisho.gui import ops
from hisho.gui.models.downloads_tab import DownloadsTab
from hisho.gui.models.hub_best import show_best
from hisho.gui.models.hub_tab import BADGE_WIDTH, HubTab, badge_style, params_label, table
from hisho.gui.shell.pages import ShowsPages
from hisho.gui.shell.protocols import HasController
from hisho.gui.shell.state_bridge import StateBridge

log = logging.getLogger("hisho.gui")
PARAMS_COL, FIT_COL = 2, 7  # Installed table columns filled in when the planner has read the headers


def _entries_and_base_models(store: ModelStore) -> tuple[list[ModelEntry], set[str], set[str]]:
    """The store's entries, the names of those that are base models (header facts, cached per file) and of
    those with their vision projector beside them (they see images)."""
    entries = store.list()
    return (entries, {e.name for e in entries if is_base_model(e.path)},
            {e.name for e in entries if projector_for(e.path) is not None})


def planner_budget() -> tuple[Any, dict[str, Any]]:
    """This machine's budget and the planner options from settings (runs on a worker lane)."""
    from hisho.core import machine as machine_mod
    from hisho.core import settings as settings_mod

    s = settings_mod.load()
    m = machine_mod.detect()
    return m.budget(), {"min_ctx": int(s["min_ctx"]), "target_ctx": max(int(s["n_ctx"]), int(s["min_ctx"])),
                        "n_batch": int(s["n_batch"]), "machine": m}


class ModelsPage(QWidget):
    def __init__(self, workers: Executor, models: ModelStore, downloads: Downloader, *,
                 load: Callable[[str], None] | None = None,
                 toast: Callable[[str], None] | None = None, kv: KVSession | None = None,
                 in_use: Callable[[], str | None] | None = None, state: StateBridge | None = None,
                 back: Callable[[], object] | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state   # what answers now: the Installed list marks it and follows a switch
        self.back = back or (lambda: None)  # to the chat, once a Load has been asked for
        self.kv = kv  # the window's KV session: its index, and its listeners told when a delete takes snapshots
        self.in_use = in_use or (lambda: None)  # the file this computer's engine has loaded, if any
        self.setWindowTitle("Models")
        self.setAcceptDrops(True)
        self.workers = workers
        self.load_model = load
        self.toast = toast or (lambda text: self.say(text))
        self.models = models          # the app's registry and download queue (the root's: Services)
        self.downloader = downloads
        self.entries: list[ModelEntry] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.tabs = QTabWidget()
        self.installed = self._build_installed()
        self.hub = HubTab(workers, planner_budget, models)
        show_best(self.hub)  # the Hub tab opens on the models best for this computer
        self.hub.download_requested.connect(self.download)
        self.hub.token_requested.connect(self.ask_token)
        self.hub.load_requested.connect(self.load_named)
        self.downloads = DownloadsTab(workers, self.downloader, self.toast)
        self.downloads.finished.connect(lambda _entry: self.refresh())
        self.downloads.token_needed.connect(self.ask_token)
        self.downloads.load_requested.connect(lambda entry: self.load_named(entry.name))
        self.tabs.addTab(self.installed, "Installed")
        self.tabs.addTab(self.hub, "Hub")
        self.tabs.addTab(self.downloads, "Downloads")
        lay.addWidget(self.tabs)
        if state is not None:
            state.changed.connect(lambda _now: self._mark_answering())
        self.refresh()

    # ----- Installed -------------------------------------------------------------------------------------

    def _build_installed(self) -> QWidget:
        page = QWidget()
        lay = QVBoxLayout(page)
        lay.setContentsMargins(12, 12, 12, 12)
        self.model_table = table(["Name", "Architecture", "Params", "Quant", "Size", "Context", "Source",
                                  "Fit"], 0)
        self.model_table.horizontalHeader().setSectionResizeMode(FIT_COL, QHeaderView.ResizeMode.Fixed)
        self.model_table.setColumnWidth(FIT_COL, BADGE_WIDTH)
        self.model_table.itemSelectionChanged.connect(self._selection_changed)
        self.installed_status = QLabel("Drop a .gguf file here to import it.")
        self.installed_status.setObjectName("Meta")
        self.installed_status.setWordWrap(True)
        row = QHBoxLayout()
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("Primary")
        self.default_button = QPushButton("Set as default")
        self.delete_button = QPushButton("Delete…")
        self.reveal_button = QPushButton("Show in folder")
        importer = QPushButton("Import…")
        self.load_button.clicked.connect(self.load_selected)
        self.default_button.clicked.connect(self.set_default)
        self.delete_button.clicked.connect(self.delete_selected)
        self.reveal_button.clicked.connect(self.reveal_selected)
        importer.clicked.connect(self.import_dialog)
        for b in (self.load_button, self.default_button, self.delete_button, self.reveal_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(importer)
        lay.addWidget(self.model_table, 1)
        lay.addWidget(self.installed_status)
        lay.addLayout(row)
        self._selection_changed()
        return page

    def say(self, text: str) -> None:
        self.installed_status.setText(text)

    def _after(self, message: str) -> None:
        self.toast(message)
        self.refresh()

    def refresh(self) -> None:
        ops.database(self.workers, lambda: _entries_and_base_models(self.models)).success(self._listed).run()

    def _listed(self, listed: tuple[list[ModelEntry], set[str], set[str]]) -> None:
        entries, base, seeing = listed
        self.entries = entries
        self.hub.set_installed({e.sha256: e.name for e in entries if e.sha256})
        t = self.model_table
        t.setRowCount(len(entries))
        for row, e in enumerate(entries):
            src = e.source + (f" @ {e.revision[:8]}" if e.revision else "")
            arch = (e.arch or "?") + (" · base" if e.name in base else "") + \
                (" · sees images" if e.name in seeing else "")
            values = [entry_name(e).display, arch, "…", e.quant or "?", format_bytes(e.size),
                      f"{e.n_ctx_train:,}" if e.n_ctx_train else "?", src]
            for col, v in enumerate(values):
                item = QTableWidgetItem(v)
                item.setToolTip(e.path + ("\nA base model, not a chat model (no chat template): replies continue "
                                          "the text." if e.name in base else ""))
                t.setItem(row, col, item)
            pending = QLabel("…")
            pending.setObjectName("Meta")
            t.setCellWidget(row, FIT_COL, pending)
        self._mark_answering()
        self._selection_changed()
        names = [e.name for e in entries]
        ops.hub(self.workers, lambda: self._fits(names)).success(self._show_fits).quiet("no fit badges").run()

    def answering_row(self) -> int | None:
        """The Installed row of the model that answers now (None: a remote engine, or nothing loaded)."""
        now = self.state.now if self.state is not None else None
        if now is None or now.remote or not now.path:
            return None
        wanted = Path(now.path).resolve()
        return next((row for row, e in enumerate(self.entries) if Path(e.path).resolve() == wanted), None)

    def _mark_answering(self) -> None:
        """The model that answers now: its name (unchanged: a model has one name) in bold behind a green dot, and
        the tooltip says so; the others plain."""
        answering = self.answering_row()
        loading = self.state is not None and self.state.now.loading
        for row in range(len(self.entries)):
            item = self.model_table.item(row, 0)
            if item is None:
                continue
            mine = row == answering
            font = item.font()
            font.setBold(mine)
            item.setFont(font)
            item.setData(Qt.ItemDataRole.DecorationRole, QColor("#16a34a") if mine else None)
            note = ("Loading now" if loading else "Answering now") + " · " if mine else ""
            tip = item.toolTip().removeprefix("Answering now · ").removeprefix("Loading now · ")
            item.setToolTip(note + tip)

    def _fits(self, names: list[str]) -> dict[str, tuple[str, str, str, int]]:
        """name -> (verdict, label, why, parameters) from the planner (formulas and cached dry runs only: no probe here)."""
        from hisho.core.hub.fit import LABELS, badge, verdict
        from hisho.core.planner import make_plan, speed

        budget, opts = planner_budget()
        profile = speed.load_profile()
        out = {}
        for name in names:
            try:
                p = make_plan([name], opts["machine"], budget, min_ctx=opts["min_ctx"],
                              target_ctx=opts["target_ctx"], calibrate_missing=False, n_batch=opts["n_batch"],
                              n_ubatch=opts["n_batch"], store=self.models)
                wanted = min(opts["target_ctx"], p.facts.context_length if p.facts else opts["target_ctx"])
                v, why = verdict(p, budget, wanted or opts["target_ctx"])
                fast = speed.for_model(p.facts, profile) if p.facts is not None else None
                why = f"{fast.label()}; {why}" if fast is not None else why
                v = badge(v, fast.decode_short if fast is not None else None)
                out[name] = (v, LABELS[v], why, p.facts.n_params if p.facts else 0)
            except Exception as exc:  # a damaged or missing file: say so in the row
                out[name] = ("unknown", "Unknown", str(exc), 0)
        return out

    def _show_fits(self, fits: dict[str, tuple[str, str, str, int]]) -> None:
        for row, e in enumerate(self.entries):
            if e.name not in fits:
                continue
            v, label, why, n_params = fits[e.name]
            params = QTableWidgetItem(params_label(n_params))
            params.setToolTip(f"{n_params:,} parameters" if n_params else "not known")
            self.model_table.setItem(row, PARAMS_COL, params)
            badge = QLabel(label)
            badge.setObjectName("FitBadge")
            badge.setProperty("verdict", v)
            badge.setStyleSheet(badge_style(v))
            badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
            badge.setToolTip(why)
            self.model_table.setCellWidget(row, FIT_COL, badge)

    def selected(self) -> ModelEntry | None:
        rows = self.model_table.selectionModel().selectedRows() if self.model_table.selectionModel() else []
        return self.entries[rows[0].row()] if rows and rows[0].row() < len(self.entries) else None

    def _selection_changed(self) -> None:
        e = self.selected()
        for b in (self.load_button, self.default_button, self.reveal_button):
            b.setEnabled(e is not None)
        self.delete_button.setEnabled(e is not None and e.source != "bundled")

    def load_selected(self) -> None:
        e = self.selected()
        if e is not None:
            self.load_named(e.name)

    def load_named(self, name: str) -> None:
        """Load (switch the chat to) an installed model: the Load button, Load now on a finished download,
        "Installed · Load" on a hub file."""
        if self.load_model is not None:
            self.load_model(name)
            self.toast(f"Loading {name}…")
            self.back()   # the chat, where the load's progress shows and the model then answers

    def set_default(self) -> None:
        e = self.selected()
        if e is None:
            return
        from hisho.core import settings as settings_mod

        name = e.name

        def work() -> None:
            s = settings_mod.load()
            s.set("default_model", name)
            s.save()

        ops.database(self.workers, work).success(lambda _r: self.toast(f"{name} is the default model now")).run()

    def _index(self) -> KVIndex:
        """The window's KV index (its database connection) when there is one; else the data folder's."""
        return self.kv.index if self.kv is not None else KVIndex()

    def delete_selected(self) -> None:
        """Ask what goes with the model (file space, KV snapshots: a store-lane read), then ask the user."""
        e = self.selected()
        if e is None:
            return
        name = e.name
        loaded = self.in_use()
        if loaded and os.path.realpath(loaded) == os.path.realpath(e.path):
            # The engine maps the file: deleting it would leave the chat answering from a file that is gone and
            # fail at the engine's next start. The user switches first (what LM Studio's "eject" is for).
            self.say(f"{name} is the model in use: switch to another model (Switch model in the chat header), "
                     "then delete it.")
            return
        self.say(f"Looking up what goes with {name}…")
        ops.database(self.workers, lambda: plan_removal(name, self.models, self._index())) \
            .success(self._confirm_delete).failure(lambda exc: self.say(f"Not deleted: {exc}")).run()

    def _confirm_delete(self, plan: Removal) -> None:
        self.say("")
        answer = QMessageBox.question(self, "Delete model", f"Delete {plan.name}?\n\n{plan.message()}")
        if answer != QMessageBox.StandardButton.Yes:
            return
        name = plan.name
        ops.database(self.workers, lambda: remove_model(name, self.models, self._index())) \
            .success(self._deleted).failure(lambda exc: self.toast(str(exc))).run()

    def _deleted(self, done: Removal) -> None:
        if self.kv is not None and done.snapshots and not done.kept_for:
            self.kv.changed()  # the sidebar's KV badges
        gone = f" and {done.count()}" if done.snapshots and not done.kept_for else ""
        self._after(f"Deleted {done.name}{gone}")

    def reveal_selected(self) -> None:
        e = self.selected()
        if e is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(e.path).parent)))

    def import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path, mode: str | None = None) -> None:
        if mode is None:
            box = QMessageBox(self)
            box.setWindowTitle("Import model")
            box.setText(f"Import {path.name}?")
            box.setInformativeText("Copy it into Hisho's models folder, or link to it where it is?")
            copy = box.addButton("Copy", QMessageBox.ButtonRole.AcceptRole)
            link = box.addButton("Link", QMessageBox.ButtonRole.AcceptRole)
            box.addButton(QMessageBox.StandardButton.Cancel)
            box.exec()
            mode = "copy" if box.clickedButton() is copy else "link" if box.clickedButton() is link else ""
        if not mode:
            return
        self.say(f"Importing {path.name}…")
        ops.database(self.workers, lambda: self.models.add(path, copy=mode == "copy", link=mode == "link")) \
            .success(lambda e: self._after(f"Imported {e.name}")) \
            .failure(lambda exc: self.say(f"Not imported: {exc}")).run()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt naming
        urls = event.mimeData().urls()
        if urls and all(u.toLocalFile().lower().endswith(".gguf") for u in urls):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.tabs.setCurrentWidget(self.installed)
        for url in event.mimeData().urls():
            self.import_file(Path(url.toLocalFile()))

    # ----- Hub token ---------------------------------------------------------------------------------------

    def ask_token(self) -> None:
        from hisho.core.hub import token

        text, ok = QInputDialog.getText(self, "Hugging Face token", "Token for gated repositories "
                                        "(stored in the system keyring when available):",
                                        QLineEdit.EchoMode.Password)
        if ok and text.strip():
            ops.database(self.workers, lambda: token.set_token(text)).success(self.hub.token_stored) \
                .failure(lambda exc: self.hub.say(f"Token not stored: {exc}")).run()

    # ----- Downloads -------------------------------------------------------------------------------------

    def download(self, f: QuantFile) -> None:
        """Queue ``f`` and start it (``DownloadsTab.download``), showing the Downloads tab."""
        self.tabs.setCurrentWidget(self.downloads)
        self.downloads.download(f)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if event.type() == QEvent.Type.Close and watched is self.window() and watched is not self:
            self.downloads.pause_all()  # before the window waits for its worker lanes
        return False


def open_models(window: ShowsPages, tab: str = "Installed") -> ModelsPage:
    """View → Models (Ctrl+M): the Models page of the window, on ``tab``."""
    page = window.show_page("models")
    assert isinstance(page, ModelsPage)
    page.tabs.setCurrentIndex({"Installed": 0, "Hub": 1, "Downloads": 2}.get(tab, 0))
    return page


class OffersDownloads(ShowsPages, HasController, Protocol):
    """What the start-up offer uses of the window."""


def offer_unfinished(window: OffersDownloads) -> None:
    """At start-up: downloads left unfinished by an earlier run are offered for resuming."""

    def found(jobs: list[Job]) -> None:
        if jobs:
            def show() -> None:
                open_models(window, "Downloads")

            window.controller.toast(f"{len(jobs)} model download(s) did not finish.", show, label="Show downloads")

    downloads = window.ctx.downloads
    ops.database(window.ctx.executor, downloads.unfinished).success(found).run()
