"""The Models page's Downloads tab: the queue with bytes, speed and ETA; Pause, Resume, Cancel. Unfinished
downloads from an earlier run are listed paused, ready to resume (the window offers them at start-up:
``models_page.offer_unfinished``).

Rules of use: a download runs on the ``download`` lane (one at a time) in a process of its own
(``hisho.core.hub.child``: it shares no GIL with the window); the queue is read and written on the ``store``
lane. Progress comes through the bridge at most 10 times a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hisho.core.errors import UserError
from hisho.core.executor import Executor
from hisho.core.hub import Downloader, GatedRepo, Job, Progress, QuantFile, Stopped
from hisho.core.hub.child import run_child
from hisho.core.models.store import ModelEntry
from hisho.core.units import MIB, format_bytes
from hisho.gui.models.hub_tab import table

log = logging.getLogger("hisho.gui")


class DownloadsTab(QWidget):
    finished = Signal(object)     # the ModelEntry of a download that completed
    token_needed = Signal()       # a download stopped because the repository is gated

    def __init__(self, workers: Executor, downloader: Downloader, toast: Callable[[str], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workers = workers
        self.downloader = downloader
        self.toast = toast
        self.jobs: dict[int, Job] = {}
        self.live: dict[int, Progress] = {}
        self.queued: set[int] = set()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 12, 12, 12)
        self.resume_banner = QLabel("")
        self.resume_banner.setObjectName("Banner")
        self.resume_banner.hide()
        self.job_table = table(["Model", "Progress", "Bytes", "Speed", "ETA", "State"], 0)
        row = QHBoxLayout()
        self.pause_button = QPushButton("Pause")
        self.resume_button = QPushButton("Resume")
        self.cancel_button = QPushButton("Cancel")
        self.pause_button.clicked.connect(lambda: self._on_job(self.pause))
        self.resume_button.clicked.connect(lambda: self._on_job(self.resume))
        self.cancel_button.clicked.connect(lambda: self._on_job(self.cancel))
        for b in (self.pause_button, self.resume_button, self.cancel_button):
            row.addWidget(b)
        row.addStretch(1)
        lay.addWidget(self.resume_banner)
        lay.addWidget(self.job_table, 1)
        lay.addLayout(row)
        self.refresh()

    def refresh(self) -> None:
        self.workers.submit("store", self.downloader.unfinished, done=self._show_jobs)

    def _show_jobs(self, jobs: list[Job]) -> None:
        self.jobs = {j.id: j for j in jobs}
        t = self.job_table
        t.setRowCount(len(jobs))
        for row, j in enumerate(jobs):
            item = QTableWidgetItem(f"{j.repo} · {Path(j.name).name}")
            item.setData(Qt.ItemDataRole.UserRole, j.id)
            t.setItem(row, 0, item)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            t.setCellWidget(row, 1, bar)
            self._paint_job(row, j, self.live.get(j.id))
        paused = [j for j in jobs if j.state in ("paused", "failed") and j.id not in self.queued]
        self.resume_banner.setText(f"{len(paused)} download(s) stopped before they finished. Select one and "
                                   "press Resume." if paused else "")
        self.resume_banner.setVisible(bool(paused))

    def _row_of(self, job_id: int) -> int:
        for row in range(self.job_table.rowCount()):
            item = self.job_table.item(row, 0)
            if item is not None and item.data(Qt.ItemDataRole.UserRole) == job_id:
                return row
        return -1

    def _paint_job(self, row: int, j: Job, p: Progress | None) -> None:
        t = self.job_table
        done = p.done if p else j.done_bytes
        total = p.total if p else j.size
        bar = t.cellWidget(row, 1)
        if isinstance(bar, QProgressBar):
            bar.setValue(int(1000 * done / total) if total else 0)
        speed = f"{p.speed / MIB:.1f} MiB/s" if p and p.speed else ""
        eta = f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}" if p and p.eta_s is not None else ""
        state = "downloading" if j.id in self.queued and p else ("queued" if j.id in self.queued else j.state)
        if j.error and state == "failed":
            state = f"failed: {j.error}"
        for col, text in ((2, f"{format_bytes(done)} / {format_bytes(total)}"), (3, speed), (4, eta), (5, state)):
            item = t.item(row, col)
            if item is None:
                item = QTableWidgetItem()
                t.setItem(row, col, item)
            if item.text() != text:  # progress repaints 10 times a second: touch only what changed
                item.setText(text)
                item.setToolTip(text)

    def _on_job(self, fn: Callable[[int], None]) -> None:
        rows = self.job_table.selectionModel().selectedRows()
        if not rows and self.job_table.rowCount() == 1:
            rows = [self.job_table.model().index(0, 0)]
        for r in rows:
            item = self.job_table.item(r.row(), 0)
            if item is not None:
                fn(int(item.data(Qt.ItemDataRole.UserRole)))

    def download(self, f: QuantFile) -> None:
        """Queue ``f`` and start it on the download lane (one download at a time)."""
        self.workers.submit("store", lambda: self.downloader.enqueue(f), done=lambda job: self.resume(job.id))

    def resume(self, job_id: int) -> None:
        if job_id in self.queued:
            return
        self.queued.add(job_id)
        post = self.workers.post

        def progress(p: Progress) -> None:
            post(lambda: self._progress(p))

        def work() -> ModelEntry:
            if job_id not in self.queued:  # paused or cancelled while it waited for the lane
                raise Stopped("pause")
            entry: ModelEntry = run_child(self.downloader, job_id, progress)
            return entry

        self.workers.submit("download", work,
                            done=lambda entry: self._finished(job_id, entry),
                            failed=lambda exc: self._stopped(job_id, exc))
        self.refresh()

    def _progress(self, p: Progress) -> None:
        if p.job_id not in self.queued:
            return  # a late report of a download that was paused or cancelled meanwhile
        self.live[p.job_id] = p
        row = self._row_of(p.job_id)
        job = self.jobs.get(p.job_id)
        if row >= 0 and job is not None:
            self._paint_job(row, job, p)

    def _finished(self, job_id: int, entry: ModelEntry) -> None:
        self.queued.discard(job_id)
        self.live.pop(job_id, None)
        self.toast(f"Downloaded {entry.name} (sha256 verified). Select it and press Load to chat with it.")
        self.finished.emit(entry)
        self.refresh()

    def _stopped(self, job_id: int, exc: BaseException) -> None:
        self.queued.discard(job_id)
        self.live.pop(job_id, None)
        if isinstance(exc, Stopped):
            self.toast("Download cancelled; the partial file was removed." if exc.reason == "cancel"
                       else "Download paused.")
        else:
            if not isinstance(exc, UserError):
                log.error("download failed", exc_info=exc)
            self.toast(f"Download stopped: {exc}")
            if isinstance(exc, GatedRepo):
                self.token_needed.emit()  # then Resume tries again with it
        self.refresh()

    def pause_all(self) -> None:
        """Pause what is downloading (the window is closing): the next start offers to resume it."""
        for job_id in list(self.queued):
            self.downloader.pause(job_id)

    def pause(self, job_id: int) -> None:
        self.downloader.pause(job_id)
        if not self.downloader.running(job_id):
            self.queued.discard(job_id)
            self.refresh()

    def cancel(self, job_id: int) -> None:
        self.downloader.cancel(job_id)
        if not self.downloader.running(job_id):
            self.queued.discard(job_id)
            self.refresh()
