"""The app's Settings page (File → Settings…, a page of the window): a list of sections on the left.

KV cache page: the disk budget (applied at once: eviction runs on the store lane), the KV cache type
(f16 / q8_0; used at the next model load), disk used against the budget, the KV folder, and every chat and
document that has KV saved, with its size, the seconds it saves, when it was last used and whether it is kept
longest; a row's KV can be deleted, or all of it ("Clear all", after a confirmation). Conversation text is
never touched: KV files are a cache.

Rules of use: ``open_preferences(window)`` on the GUI thread. Every read and write of the KV store runs on the
app executor's ``store`` lane (Clear all on ``kv``: it waits for saves in flight) with success and failure
callbacks on the GUI thread (``hisho.core.executor``); the page refreshes itself
whenever the session reports a change while it is open. Sizes count a shared chunk for each owner that needs
it; the total counts it once (the same rule as the sidebar badges, ``hisho.gui.chat.kv_status``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import shiboken6
from PySide6.QtCore import QSize, Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QHideEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hisho.core import settings as settings_mod
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.stored import StoreReport, list_stored
from hisho.core.units import GIB, format_bytes
from hisho.gui import ops
from hisho.gui.chat.kv_status import human_seconds
from hisho.gui.settings.performance_page import PerformancePage
from hisho.gui.settings.settings_page import confirm_destructive, page_layout
from hisho.gui.shell.pages import ShowsPages
from hisho.gui.shell.protocols import HasContext, SettingsWindow

log = logging.getLogger("hisho.gui")

KV_TYPES = (("f16", "f16 — exact (default)"), ("q8_0", "q8_0 — half the disk and memory, uses flash attention"))
COLUMNS = ("Chat or document", "Size", "Saves", "Last used", "Kept longest", "")
APPLY_MS = 600
NAV_WIDTH, NAV_NARROW, NARROW = 150, 118, 760   # the section list, and the page width below which it narrows  # the budget spin box applies this long after the last change


class KVCachePage(QWidget):
    """See the module docstring. ``kv`` is the window's ``KVChat`` (None when KV persistence is off)."""

    def __init__(self, window: HasContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.kv: KVChat | None = window.ctx.kv
        self.settings: settings_mod.Settings = window.ctx.settings
        self.report: StoreReport | None = None
        self.refreshes = 0  # results shown so far (tests wait on it)
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(100)
        self._refresh_timer.timeout.connect(self.refresh)
        self._budget_timer = QTimer(self)
        self._budget_timer.setSingleShot(True)
        self._budget_timer.setInterval(APPLY_MS)
        self._budget_timer.timeout.connect(self.apply_budget)
        lay = page_layout(self, "KV cache",
                          "Hisho keeps the model's memory of your chats and documents (its KV cache) on disk, so "
                          "coming back to one answers at once instead of re-reading it. It is only a cache: "
                          "deleting it never touches your conversations.")
        lay.addLayout(self._build_form())
        lay.addWidget(self._build_table(), 1)
        lay.addLayout(self._build_footer())
        if self.kv is None:
            self.status.setText("KV persistence is off for this session (the conversation database is read-only).")
            self.clear_button.setEnabled(False)
        else:
            self._listener = lambda: window.ctx.executor.post(self._refresh_soon)
            self.kv.session.on_change.append(self._listener)
            self.refresh()

    # ----- layout ----------------------------------------------------------------------------------------

    def _build_form(self) -> QFormLayout:
        form = QFormLayout()
        form.setSpacing(10)
        self.budget = QDoubleSpinBox()
        self.budget.setRange(0.0, 100_000.0)
        self.budget.setDecimals(1)
        self.budget.setSingleStep(1.0)
        self.budget.setSuffix(" GiB")
        self.budget.setValue(int(self.settings["kv_disk_budget_bytes"]) / GIB)
        self.budget.setToolTip("When saved KV passes this size, the least recently used chats are removed first; "
                               "pinned chats and documents are kept longest.")
        self.budget.valueChanged.connect(lambda _v: self._budget_timer.start())
        self.kv_type = QComboBox()
        for name, label in KV_TYPES:
            self.kv_type.addItem(label, name)
        current = str(self.settings["kv_type"])
        if self.kv_type.findData(current) < 0:
            self.kv_type.addItem(current, current)
        self.kv_type.setCurrentIndex(self.kv_type.findData(current))
        self.kv_type.currentIndexChanged.connect(lambda _i: self.apply_kv_type())
        type_note = QLabel("Applies the next time a model is loaded. KV saved with one type is never loaded "
                           "into the other: chats saved before the change re-read once.")
        type_note.setObjectName("Meta")
        type_note.setWordWrap(True)
        self.usage_bar = QProgressBar()
        self.usage_bar.setObjectName("ContextMeter")  # the thin bar of the header's context meter
        self.usage_bar.setRange(0, 1000)
        self.usage_bar.setTextVisible(False)
        self.usage_label = QLabel("…")
        self.usage_label.setObjectName("Meta")
        folder = QHBoxLayout()
        self.folder_label = QLabel(str(self._kv_dir()))
        self.folder_label.setObjectName("Meta")
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        open_button = QPushButton("Open folder")
        open_button.clicked.connect(self.open_folder)
        folder.addWidget(self.folder_label, 1)
        folder.addWidget(open_button)
        self.budget.setFixedWidth(140)
        self.kv_type.setMinimumWidth(300)
        form.addRow("Disk budget", self.budget)
        form.addRow("KV cache type", _stack(self.kv_type, type_note))
        form.addRow("Disk used", _stack(self.usage_bar, self.usage_label))
        form.addRow("Folder", folder)
        return form

    def _build_table(self) -> QTableWidget:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("KVTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setShowGrid(False)
        head = self.table.horizontalHeader()
        head.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        tips = {1: "Disk this chat's saved KV needs. A part shared with other chats (the same document) counts "
                   "for each of them.",
                2: "Prefill time a resume skips, estimated from the speeds measured on this computer."}
        for col, tip in tips.items():
            header = self.table.horizontalHeaderItem(col)
            if header is not None:
                header.setToolTip(tip)
        return self.table

    def _build_footer(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.status = QLabel("Sizes count a part shared by several chats for each; the total counts it once.")
        self.status.setObjectName("Meta")
        self.status.setWordWrap(True)
        self.clear_button = QPushButton("Clear all…")
        self.clear_button.setToolTip("Delete every saved KV file. Conversations are kept; they re-read once.")
        self.clear_button.clicked.connect(self.clear_all)
        row.addWidget(self.status, 1)
        row.addWidget(self.clear_button)
        return row

    # ----- data ------------------------------------------------------------------------------------------

    def _kv_dir(self) -> Any:
        from hisho.core import paths

        return self.kv.session.kv_dir if self.kv is not None else paths.kv_dir()

    def _refresh_soon(self) -> None:
        if not shiboken6.isValid(self):  # the window (and this page with it) is gone; the session lives on
            return
        if self.kv is not None and self.isVisible():  # read again when next shown (showEvent)
            self._refresh_timer.start()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt naming
        super().showEvent(event)
        if self.refreshes:
            self.refresh()

    def detach(self) -> None:
        """The dialog closes: stop listening to the session (before the widgets go)."""
        if self.kv is not None:
            try:
                self.kv.session.on_change.remove(self._listener)
            except ValueError:
                pass
            self.kv = None

    def refresh(self) -> None:
        """Re-read what is stored (on the store lane); the page shows it when it comes back."""
        if self.kv is None:
            return
        session = self.kv.session
        ops.database(self.w.ctx.executor, lambda: list_stored(session.index, session.budget_bytes)) \
            .success(self._show).failure(self._failed).run()

    def _show(self, report: StoreReport) -> None:
        if self.kv is None:
            return  # came back after the dialog closed
        self.report = report
        budget = max(report.budget_bytes, 1)
        self.usage_bar.setValue(min(1000, int(1000 * report.total_bytes / budget)))
        self.usage_label.setText(f"{format_bytes(report.total_bytes)} of {format_bytes(report.budget_bytes)} · "
                                 f"{report.counts()}")
        self.table.setRowCount(len(report.items))
        for row, item in enumerate(report.items):
            u = item.usage
            kept = "document" if item.kind == "document" else ("pinned" if item.kept else "")
            saves = human_seconds(u.seconds_saved) if u.measured else "not measured"
            cells = (item.name, format_bytes(u.bytes), saves,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(u.last_used)), kept)
            for col, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setData(Qt.ItemDataRole.UserRole, item.owner)
                if col == 0:
                    cell.setToolTip(f"{item.name}\n{u.n_tokens:,} tokens; deleting it frees "
                                    f"{format_bytes(u.own_bytes)} (the rest is shared).")
                self.table.setItem(row, col, cell)
            button = QPushButton("Delete")
            button.setObjectName("Flat")
            button.setToolTip("Delete this KV (the conversation itself is kept)")
            button.clicked.connect(lambda _=False, o=item.owner: self.delete(o))
            self.table.setCellWidget(row, len(COLUMNS) - 1, button)
        self.refreshes += 1

    def owners(self) -> list[str]:
        cells = (self.table.item(r, 0) for r in range(self.table.rowCount()))
        return [str(c.data(Qt.ItemDataRole.UserRole)) for c in cells if c is not None]

    # ----- actions ---------------------------------------------------------------------------------------

    def apply_budget(self) -> None:
        """Save the budget and evict down to it now, off the GUI thread."""
        self._budget_timer.stop()
        value = int(round(self.budget.value() * GIB))
        if value == int(self.settings["kv_disk_budget_bytes"]) and (
                self.kv is None or self.kv.session.budget_bytes == value):
            return
        self.settings.set("kv_disk_budget_bytes", value)
        if self.kv is None:
            self.settings.save()
            return
        session, settings = self.kv.session, self.settings

        def job() -> list[str]:
            settings.save()
            return session.set_budget(value)

        ops.database(self.w.ctx.executor, job).success(self._evicted).failure(self._failed).run()

    def _evicted(self, dropped: list[str]) -> None:
        if self.kv is None:
            return  # came back after the dialog closed
        self.status.setText(f"Budget applied: removed the KV of {len(dropped)} item"
                            f"{'s' if len(dropped) != 1 else ''} to fit." if dropped else "Budget applied.")

    def apply_kv_type(self) -> None:
        name = str(self.kv_type.currentData())
        if name == self.settings["kv_type"]:
            return
        self.settings.set("kv_type", name)
        ops.save_settings(self.w.ctx.executor, self.settings).failure(self._failed).run()
        self.status.setText(f"KV cache type {name}: used from the next model load.")

    def delete(self, owner: str) -> None:
        if self.kv is not None:
            session = self.kv.session
            ops.database(self.w.ctx.executor, lambda: session.delete(owner)).failure(self._failed).run()

    def clear_all(self) -> None:
        if self.kv is None:
            return
        if not confirm_destructive(self, "Clear all KV cache",
                                   "Delete every saved KV file?\n\nYour conversations and documents are kept; "
                                   "each re-reads once (slower) the next time you use it.",
                                   "Delete all", "ConfirmClearKV") or self.kv is None:
            return
        # The kv lane: clearing waits for saves in flight (kv), then deletes through the store lane.
        ops.kv_files(self.w.ctx.executor, self.kv.session.clear).success(self._cleared).failure(self._failed).run()

    def _failed(self, exc: BaseException) -> None:
        log.warning("KV storage action failed: %s", exc)
        if self.kv is not None:
            self.status.setText(f"That did not work: {exc}")

    def _cleared(self, freed: int) -> None:
        if self.kv is not None:
            self.status.setText(f"Cleared {format_bytes(freed)} of KV cache.")

    def open_folder(self) -> None:
        folder = self._kv_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


def _stack(*widgets: QWidget) -> QWidget:
    """Widgets one above the other, tight, as one form field (a control and its note)."""
    box = QWidget()
    lay = QVBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(4)
    for w in widgets:
        lay.addWidget(w, 0, Qt.AlignmentFlag.AlignLeft if isinstance(w, QComboBox) else Qt.AlignmentFlag(0))
    return box


class PreferencesDialog(QWidget):
    """The Settings page of the window: pages on the left, the chosen one on the right. Changes apply as they
    are made; leaving the page applies a budget typed just before."""

    def __init__(self, window: SettingsWindow) -> None:
        super().__init__(window.window())
        self.setWindowTitle("Settings")
        self.nav = QListWidget()
        self.nav.setObjectName("SettingsNav")
        self.nav.setFixedWidth(NAV_WIDTH)
        self.pages = QStackedWidget()
        self.kv_page = KVCachePage(window)
        self._add("KV cache", self.kv_page)
        self.performance_page = PerformancePage(window)
        self._add("Performance", self.performance_page)

        from hisho.gui.settings.data_page import DataPage
        from hisho.gui.settings.prompts_page import PromptsPage

        self.prompts_page = PromptsPage(window)
        self._add("System prompts", self.prompts_page)
        self._add("Your data", DataPage(window))
        from hisho.gui.settings.engines_page import EnginesPage

        self._add("Engines", EnginesPage(window))

        from hisho.gui.settings.api_page import ApiPage

        self._add("API", ApiPage(window))
        from hisho.gui.settings.tools_page import ToolsPage

        self.tools_page = ToolsPage(window)
        self._add("Tools", self.tools_page)
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.nav.setCurrentRow(0)
        heading = QLabel("Settings")
        heading.setObjectName("PageTitle")
        body = QHBoxLayout()
        body.setSpacing(18)
        body.addWidget(self.nav)
        body.addWidget(self.pages, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 14, 18, 12)
        lay.addWidget(heading)
        lay.addLayout(body, 1)

    def _add(self, name: str, page: QWidget) -> None:
        self.nav.addItem(name)
        item = self.nav.item(self.nav.count() - 1)
        # A row's height of its own: the style sheet's item padding took effect only after a theme change.
        item.setSizeHint(QSize(0, self.nav.fontMetrics().height() + 14))
        self.pages.addWidget(page)

    def show_section(self, name: str) -> None:
        """Show the section named ``name`` (its row in the list)."""
        for row in range(self.nav.count()):
            if self.nav.item(row).text() == name:
                self.nav.setCurrentRow(row)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt naming
        super().resizeEvent(event)
        self.nav.setFixedWidth(NAV_WIDTH if self.width() >= NARROW else NAV_NARROW)  # the section gets the room

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 - Qt naming
        self.kv_page.apply_budget()  # a budget typed just before leaving the page still applies
        super().hideEvent(event)


SettingsPage = PreferencesDialog


def open_preferences(window: ShowsPages) -> PreferencesDialog:
    """File → Settings… (Ctrl+Alt+S): the Settings page of the window."""
    page = window.show_page("settings")
    assert isinstance(page, PreferencesDialog)
    return page
