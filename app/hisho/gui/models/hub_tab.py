"""The Models page's Hub tab: search GGUF repositories, open one to see its files grouped by quant with a
Fits / Tight / Won't fit badge and the plan behind it, the recommended file marked, and the model card.

Rules of use: every hub call (search, listing, header reads, the model card) runs on the ``hub`` worker lane;
results come back through the bridge. A reply for an older request (the user typed again or opened another
repository) is dropped by its sequence number. Failures are one line with a Retry button; a gated repository
asks for a token (``token_requested``, only when none was refused) and opens again once one is stored. A file that won't fit
this computer also offers "Run on <engine>" when remote engines are configured (``remote_names``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from hisho.core.executor import Executor
from hisho.core.hub import Fit, GatedRepo, QuantFile, RepoSummary
from hisho.core.models.store import ModelStore
from hisho.core.units import format_bytes
from hisho.gui import ops
from hisho.gui.shell import theme

log = logging.getLogger("hisho.gui")

BADGE_WIDTH = 110
STACK_BELOW = 900   # narrower than this, the file list goes under the repositories (the table gets the width)
SORTS = (("Most downloaded", "downloads"), ("Most liked", "likes"), ("Recently updated", "updated"))


def verdict_colour(verdict: str) -> str:
    t = theme.current()
    return {"fits": "#15803d" if not t.dark else "#22c55e", "tight": t.warn, "slow": t.warn,
            "wont_fit": t.error}.get(verdict, t.muted)


def badge_style(verdict: str) -> str:
    color = verdict_colour(verdict) if verdict != "fits" else "#15803d"
    return f"color: white; background: {color}; border-radius: 8px; padding: 2px 8px; font-weight: 600;"


def params_label(n: int) -> str:
    """A parameter count the way model names say it: 135M, 1.7B, 8.0B, 70B."""
    if n <= 0:
        return "?"
    if n >= 10**10:
        return f"{n / 10**9:.0f}B"
    return f"{n / 10**9:.1f}B" if n >= 10**9 else f"{n / 10**6:.0f}M"


def table(headers: list[str], stretch: int) -> QTableWidget:
    """A read-only, row-selecting table; column ``stretch`` takes the spare width."""
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().hide()
    t.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    t.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
    t.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    head = t.horizontalHeader()
    for col in range(len(headers)):
        head.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch if col == stretch
                                  else QHeaderView.ResizeMode.ResizeToContents)
    return t


class HubTab(QWidget):
    download_requested = Signal(object)   # a QuantFile
    load_requested = Signal(str)          # an installed file's model name (the row says "Installed · Load")
    token_requested = Signal()
    run_remote_requested = Signal(object, str)   # (QuantFile, remote engine name)

    def __init__(self, workers: Executor, budget: Callable[[], tuple[Any, dict[str, Any]]], models: ModelStore,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workers = workers
        self.models = models              # the app's model registry (read on worker lanes)
        self.budget = budget              # () -> (Budget, planner options); called on the hub lane
        self._seq = 0
        self._page = 0
        self._text = ""
        self.repo: str | None = None
        self.fits: list[Fit] = []
        self._retry: Callable[[], None] | None = None
        self.remote_names: list[str] = []   # Settings → Engines, set by the Models page
        self.gated_repo: str | None = None  # the repository that failed for want of a token (opened again after)
        self.installed: dict[str, str] = {}  # sha256 of an installed model (parts joined by ",") -> its name
        self.shown: list[QuantFile] = []     # the open repository's files, in table order
        self._build()

    # ----- layout ----------------------------------------------------------------------------------------

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 12, 12, 12)
        bar = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search GGUF models on Hugging Face (e.g. qwen, llama, gemma)")
        self.query.returnPressed.connect(self.search)
        self.sort = QComboBox()
        for label, key in SORTS:
            self.sort.addItem(label, key)
        self.sort.currentIndexChanged.connect(lambda _i: self.search())
        go = QPushButton("Search")
        go.setObjectName("Primary")
        go.clicked.connect(self.search)
        self.token_button = QPushButton("Token…")
        self.token_button.setToolTip("A Hugging Face token, for gated repositories")
        self.token_button.clicked.connect(self.token_requested.emit)
        bar.addWidget(self.query, 1)
        bar.addWidget(self.sort)
        bar.addWidget(go)
        bar.addWidget(self.token_button)
        lay.addLayout(bar)
        status = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("Meta")
        self.status.setWordWrap(True)
        self.retry = QPushButton("Retry")
        self.retry.setObjectName("Flat")
        self.retry.hide()
        self.retry.clicked.connect(lambda: self._retry() if self._retry else None)
        status.addWidget(self.status, 1)
        status.addWidget(self.retry)
        lay.addLayout(status)

        split = self.split = QSplitter()
        split.setChildrenCollapsible(False)
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        self.results = QListWidget()
        self.results.setSpacing(3)
        self.results.currentItemChanged.connect(self._picked)
        self.more = QPushButton("More results")
        self.more.setObjectName("Flat")
        self.more.clicked.connect(self.next_page)
        self.more.hide()
        ll.addWidget(self.results, 1)
        ll.addWidget(self.more)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        self.repo_title = QLabel("Pick a repository to see its files and whether they fit this computer.")
        self.repo_title.setObjectName("DialogTitle")
        self.repo_title.setWordWrap(True)
        self.recommend = QLabel("")
        self.recommend.setWordWrap(True)
        self.files = QTableWidget(0, 6)
        self.files.setHorizontalHeaderLabels(["Quant", "Params", "Size", "Fit", "Why", ""])
        self.files.verticalHeader().hide()
        self.files.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.files.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        # Every column is on screen at any width: the short ones take their contents' width, "Why" takes what
        # is left and elides (its tooltip has it whole); no sideways scrolling, which hid the Download column.
        self.files.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.files.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.files.setWordWrap(False)
        head = self.files.horizontalHeader()
        head.setMinimumSectionSize(24)
        head.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        for col in (0, 1, 2, 5):
            head.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(3, QHeaderView.ResizeMode.Fixed)
        self.files.setColumnWidth(3, BADGE_WIDTH)
        self.card = QTextBrowser()
        self.card.setOpenExternalLinks(True)
        self.card.setPlaceholderText("The repository's model card appears here.")
        rl.addWidget(self.repo_title)
        rl.addWidget(self.recommend)
        rl.addWidget(self.files, 3)
        rl.addWidget(self.card, 2)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(1, 2)
        split.setSizes([330, 700])
        lay.addWidget(split, 1)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt naming
        """Side by side when wide; the files under the repositories when narrow (a 700 px window)."""
        super().resizeEvent(event)
        narrow = self.width() < STACK_BELOW
        wanted = Qt.Orientation.Vertical if narrow else Qt.Orientation.Horizontal
        if self.split.orientation() != wanted:
            self.split.setOrientation(wanted)
            self.split.setSizes([200, 500] if narrow else [330, 700])

    # ----- messages --------------------------------------------------------------------------------------

    def say(self, text: str, retry: Callable[[], None] | None = None) -> None:
        self.status.setText(text)
        self._retry = retry
        self.retry.setVisible(retry is not None)

    def _failed(self, seq: int, retry: Callable[[], None]) -> Callable[[BaseException], None]:
        def failed(exc: BaseException) -> None:
            if seq != self._seq:
                return
            from hisho.core.errors import UserError

            if not isinstance(exc, UserError):
                log.error("hub request failed", exc_info=exc)
            offline = type(exc).__name__ == "HubOffline" and str(exc).startswith("Offline")
            line = str(exc).splitlines()[0]
            self.say(line, None if offline else retry)
            self._unchecked(line)
            if isinstance(exc, GatedRepo) and self.repo:
                self.gated_repo = self.repo
                if not exc.token_refused:  # a refused token is said in the line; Token… replaces it
                    self.token_requested.emit()
        return failed

    def _unchecked(self, why: str) -> None:
        """The files' badges still say "checking…": the headers could not be read."""
        for row in range(self.files.rowCount()):
            cell = self.files.cellWidget(row, 3)
            if isinstance(cell, QLabel) and cell.text() == "checking…":
                cell.setText("—")
                cell.setToolTip(why)

    def token_stored(self, where: str) -> None:
        """A token was stored: say where, and open again the repository that asked for it."""
        self.say(f"Token stored ({where}).")
        repo, self.gated_repo = self.gated_repo, None
        if repo is not None:
            self.open_repo(repo)

    # ----- search ----------------------------------------------------------------------------------------

    def search(self) -> None:
        self._text = self.query.text().strip()
        self._page = 0
        self.results.clear()
        self._fetch()

    def next_page(self) -> None:
        self._page += 1
        self._fetch()

    def _fetch(self) -> None:
        from hisho.core.hub import search

        self._seq += 1
        seq, text, page, sort = self._seq, self._text, self._page, str(self.sort.currentData())
        self.say("Searching…")
        ops.hub(self.workers, lambda: search(text, sort=sort, page=page)) \
            .success(lambda rows: self._found(seq, rows)).failure(self._failed(seq, self._fetch)).run()

    def _found(self, seq: int, rows: list[RepoSummary]) -> None:
        if seq != self._seq:
            return
        for r in rows:
            gated = "  · gated" if r.gated else ""
            item = QListWidgetItem(f"{r.repo}{gated}\n{r.downloads:,} downloads · {r.likes:,} likes")
            item.setData(Qt.ItemDataRole.UserRole, r.repo)
            item.setToolTip("Gated: needs a Hugging Face token" if r.gated else r.repo)
            self.results.addItem(item)
        total = self.results.count()
        self.say(f"{total} repositories" if total else "No GGUF repositories match.")
        self.more.setVisible(len(rows) >= 20)

    # ----- one repository -------------------------------------------------------------------------------

    def _picked(self, item: QListWidgetItem | None, _prev: object = None) -> None:
        if item is not None:
            self.open_repo(str(item.data(Qt.ItemDataRole.UserRole)))

    def open_repo(self, repo: str) -> None:
        from hisho.core.hub import model_card, repo_files

        self._seq += 1
        seq = self._seq
        self.repo = repo
        self.fits = []
        self.files.setRowCount(0)
        self.recommend.setText("")
        self.card.clear()
        self.repo_title.setText(repo)
        self.say(f"Reading {repo}…")
        retry = lambda: self.open_repo(repo)  # noqa: E731 - a retry closure

        def listed(files: list[QuantFile]) -> None:
            if seq != self._seq:
                return
            self._show_files(files)
            sees = f" that see images (projector {files[0].mmproj})" if files and files[0].mmproj else ""
            self.say(f"{len(files)} GGUF models{sees}; reading their headers to check the fit…" if files
                     else "This repository has no GGUF files.")
            if files:
                ops.hub(self.workers, lambda: self._plan(files)).success(lambda fits: self._planned(seq, fits)) \
                    .failure(self._failed(seq, retry)).run()

        ops.hub(self.workers, lambda: repo_files(repo)).success(listed).failure(self._failed(seq, retry)).run()
        ops.hub(self.workers, lambda: model_card(repo)) \
            .success(lambda text: self.card.setMarkdown(text or "*No model card.*") if seq == self._seq else None) \
            .quiet("no model card").run()

    def _plan(self, files: list[QuantFile]) -> list[Fit]:
        from hisho.core.hub import fit_files

        budget, opts = self.budget()
        return fit_files(files, budget, calibrate=True, **opts)  # one dry run per model shape (seconds)

    def _show_files(self, files: list[QuantFile]) -> None:
        self.shown = list(files)
        self.files.setRowCount(len(files))
        for row, f in enumerate(files):
            parts = f" · {len(f.parts)} parts" if len(f.parts) > 1 else ""
            quant = QTableWidgetItem(f.quant)
            quant.setToolTip(f.name)
            self.files.setItem(row, 0, quant)
            self.files.setItem(row, 1, QTableWidgetItem("…"))
            size = QTableWidgetItem(format_bytes(f.size) + parts)
            if f.mmproj:  # the model's projector: downloaded with it, never a model of its own
                size.setText(f"{size.text()} + {format_bytes(f.mmproj_size)} projector")
                size.setToolTip(f"Sees images: its vision projector {f.mmproj} comes with it and is saved beside "
                                "the model")
            self.files.setItem(row, 2, size)
            pending = QLabel("checking…")
            pending.setObjectName("Meta")
            self.files.setCellWidget(row, 3, pending)
            self.files.setItem(row, 4, QTableWidgetItem(""))
            self.files.setCellWidget(row, 5, self._action_button(f))

    def installed_name(self, f: QuantFile) -> str | None:
        """The installed model with the same bytes as ``f`` (the same sha256 for every part), if any."""
        if not f.sha256 or not all(f.sha256):
            return None
        return self.installed.get(",".join(f.sha256))

    def _action_button(self, f: QuantFile) -> QPushButton:
        name = self.installed_name(f)
        if name is None:
            button = QPushButton("Download")
            button.clicked.connect(lambda _=False, q=f: self.download_requested.emit(q))
            return button
        button = QPushButton("✓ Installed · Load")
        button.setObjectName("Installed")
        button.setToolTip(f"Already on this computer as {name} (same sha256); Load switches the chat to it")
        button.clicked.connect(lambda _=False, n=name: self.load_requested.emit(n))
        return button

    def set_installed(self, by_sha: dict[str, str]) -> None:
        """The store's models by sha256: the open repository's rows say which files are already here."""
        self.installed = dict(by_sha)
        for row, f in enumerate(self.shown[: self.files.rowCount()]):
            cell = self.files.cellWidget(row, 5)
            if cell is None or cell.objectName() in ("", "Installed"):  # not a "Run on …" button
                self.files.setCellWidget(row, 5, self._action_button(f))

    def _remote_button(self, f: QuantFile) -> QPushButton:
        """Too big here: run it on a remote engine (the first one; a menu when there are several)."""
        first = self.remote_names[0]
        button = QPushButton(f"Run on {first}")
        button.setObjectName("RunRemote")
        button.setToolTip(f"Too big for this computer: use it on {first} (Settings → Engines)")
        button.clicked.connect(lambda _=False: self.run_remote_requested.emit(f, first))
        if len(self.remote_names) > 1:
            menu = QMenu(button)
            for name in self.remote_names:
                menu.addAction(f"Run on {name}").triggered.connect(
                    lambda _=False, n=name: self.run_remote_requested.emit(f, n))
            menu.addAction("Download").triggered.connect(lambda _=False: self.download_requested.emit(f))
            button.setMenu(menu)
        return button

    def _planned(self, seq: int, fits: list[Fit]) -> None:
        if seq != self._seq:
            return
        self.fits = fits
        for row, fit in enumerate(fits):
            badge = QLabel(("★ " if fit.recommended else "") + fit.label)
            badge.setObjectName("FitBadge")
            badge.setProperty("verdict", fit.badge)
            badge.setStyleSheet(badge_style(fit.badge))
            badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
            if fit.plan:
                p = fit.plan
                badge.setToolTip(f"context {p['n_ctx']} · KV {p['type_k']} · GPU layers {p['n_gpu_layers']}\n"
                                 f"resident {format_bytes(p['resident'])} · committed {format_bytes(p['committed'])}\n"
                                 f"{p['budget']}")
            self.files.setCellWidget(row, 3, badge)
            params = QTableWidgetItem(params_label(fit.params))
            params.setToolTip(f"{fit.params:,} parameters" if fit.params else "not known")
            self.files.setItem(row, 1, params)
            why = QTableWidgetItem(fit.why)
            why.setToolTip(fit.why)
            self.files.setItem(row, 4, why)
            if fit.verdict == "wont_fit" and self.remote_names and self.installed_name(fit.file) is None:
                self.files.setCellWidget(row, 5, self._remote_button(fit.file))
        best = next((f for f in fits if f.recommended), None)
        self.recommend.setText(f"★ Recommended: {best.file.name} — {best.why}" if best else "")
        self.say(f"{len(fits)} GGUF models in {self.repo}")
