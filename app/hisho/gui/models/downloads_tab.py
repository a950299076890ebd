"""The Models page's Downloads tab: the queue with bytes, speed and ETA, and on each row the buttons that act on
it (Pause / Resume, Cancel). A finished download stays listed as "Verified · Load now" (sha256 checked; Load now
switches the chat to it). Unfinished downloads from an earlier run are listed paused, ready to resume (the window
offers them at start-up: ``models_page.offer_unfinished``).

Wording: a pause the user chose is a state, not a problem ("Paused by you", Resume whenever they like); a download left
unfinished by an earlier run gets a calm line; only a download that failed raises the warning banner.

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
from hisho.gui import ops
from hisho.gui.models.hub_tab import table

log = logging.getLogger("hisho.gui")

STATE_COL, ACTIONS_COL = 5, 6
PAUSED_BY_USER = "Paused by you"
PAUSED_TIP = "Resume continues from the bytes already downloaded, whenever you like."
VERIFIED = "✓ Verified (sha256)"


def _label(j: Job) -> str:
    return f"{Path(j.name).name} · {j.repo}"  # the file first: a narrow window elides the end


class RowActions(QWidget):
    """The buttons of one row: Pause or Resume, and Cancel; or Load now for a finished download."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        lay.setSpacing(4)
        self.pause = QPushButton("Pause")
        self.resume = QPushButton("Resume")
        self.cancel = QPushButton("Cancel")
        self.load = QPushButton("Load now")
        self.load.setObjectName("Primary")
        for b in (self.pause, self.cancel):
            b.setObjectName("Flat")
        for b in (self.pause, self.resume, self.cancel, self.load):
            lay.addWidget(b)

    def show_for(self, state: str) -> None:
        """``state``: downloading | queued | paused | failed | done"""
        self.pause.setVisible(state in ("downloading", "queued"))
        self.resume.setVisible(state in ("paused", "failed"))
        self.cancel.setVisible(state != "done")
        self.load.setVisible(state == "done")


class DownloadsTab(QWidget):
    finished = Signal(object)       # the ModelEntry of a download that completed
    load_requested = Signal(object)  # Load now on a finished row: the ModelEntry to switch to
    token_needed = Signal()         # a download stopped because the repository is gated

    def __init__(self, workers: Executor, downloader: Downloader, toast: Callable[[str], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workers = workers
        self.downloader = downloader
        self.toast = toast
        self.jobs: dict[int, Job] = {}
        self.live: dict[int, Progress] = {}
        self.queued: set[int] = set()
        self.user_paused: set[int] = set()                 # paused from its row in this session
        self.done: dict[int, tuple[str, ModelEntry]] = {}  # finished in this session (label, entry): verified
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 12, 12, 12)
        self.resume_banner = QLabel("")   # a download that failed: the one warning on this tab
        self.resume_banner.setObjectName("Banner")
        self.resume_banner.setWordWrap(True)
        self.resume_banner.hide()
        self.note = QLabel("")            # calm: downloads an earlier run left paused
        self.note.setObjectName("Meta")
        self.note.setWordWrap(True)
        self.note.hide()
        self.empty = QLabel("No downloads. Pick a model on the Hub tab and press Download.")
        self.empty.setObjectName("Meta")
        self.job_table = table(["Model", "Progress", "Bytes", "Speed", "ETA", "State", ""], 0)
        self.job_table.setWordWrap(False)  # a narrow window elides the name on one line
        lay.addWidget(self.resume_banner)
        lay.addWidget(self.note)
        lay.addWidget(self.job_table, 1)
        lay.addWidget(self.empty)
        self.refresh()

    def refresh(self) -> None:
        ops.database(self.workers, self.downloader.unfinished).success(self._show_jobs).run()

    def _show_jobs(self, jobs: list[Job]) -> None:
        self.jobs = {j.id: j for j in jobs}
        finished = [(job_id, label, e) for job_id, (label, e) in self.done.items() if job_id not in self.jobs]
        t = self.job_table
        t.setRowCount(len(jobs) + len(finished))
        for row, j in enumerate(jobs):
            self._new_row(row, j.id, _label(j))
            self._paint_job(row, j, self.live.get(j.id))
        for row, (job_id, label, entry) in enumerate(finished, start=len(jobs)):
            self._new_row(row, job_id, label)
            self._paint_done(row, entry)
        failed = [j for j in jobs if j.state == "failed" and j.id not in self.queued]
        earlier = [j for j in jobs if j.state == "paused" and j.id not in self.queued | self.user_paused]
        self.resume_banner.setText(
            (f"{len(failed)} download(s) stopped with an error: {failed[0].error or 'see the row'}. "
             "Resume on its row to try again.") if failed else "")
        self.resume_banner.setVisible(bool(failed))
        self.note.setText(f"{len(earlier)} download(s) from an earlier session are paused with what was already "
                          "downloaded; Resume continues from there." if earlier else "")
        self.note.setVisible(bool(earlier))
        self.empty.setVisible(t.rowCount() == 0)

    def _new_row(self, row: int, job_id: int, label: str) -> None:
        t = self.job_table
        item = QTableWidgetItem(label)
        item.setData(Qt.ItemDataRole.UserRole, job_id)
        t.setItem(row, 0, item)
        bar = QProgressBar()
        bar.setRange(0, 1000)
        t.setCellWidget(row, 1, bar)
        actions = RowActions()
        actions.pause.clicked.connect(lambda _=False: self.pause(job_id))
        actions.resume.clicked.connect(lambda _=False: self.resume(job_id))
        actions.cancel.clicked.connect(lambda _=False: self.cancel(job_id))
        actions.load.clicked.connect(lambda _=False: self._load(job_id))
        t.setCellWidget(row, ACTIONS_COL, actions)

    def row_actions(self, row: int) -> RowActions | None:
        w = self.job_table.cellWidget(row, ACTIONS_COL)
        return w if isinstance(w, RowActions) else None

    def row_of(self, job_id: int) -> int:
        for row in range(self.job_table.rowCount()):
            item = self.job_table.item(row, 0)
            if item is not None and item.data(Qt.ItemDataRole.UserRole) == job_id:
                return row
        return -1

    def state_text(self, row: int) -> str:
        item = self.job_table.item(row, STATE_COL)
        return item.text() if item is not None else ""

    def _set_cells(self, row: int, cells: tuple[tuple[int, str], ...]) -> None:
        t = self.job_table
        for col, text in cells:
            item = t.item(row, col)
            if item is None:
                item = QTableWidgetItem()
                t.setItem(row, col, item)
            if item.text() != text:  # progress repaints 10 times a second: touch only what changed
                item.setText(text)
                item.setToolTip(text)

    def _paint_job(self, row: int, j: Job, p: Progress | None) -> None:
        done = p.done if p else j.done_bytes
        total = p.total if p else j.size
        bar = self.job_table.cellWidget(row, 1)
        if isinstance(bar, QProgressBar):
            bar.setValue(int(1000 * done / total) if total else 0)
        speed = f"{p.speed / MIB:.1f} MiB/s" if p and p.speed else ""
        eta = f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}" if p and p.eta_s is not None else ""
        kind = "downloading" if j.id in self.queued and p else ("queued" if j.id in self.queued else j.state)
        if kind == "running":  # the row was read while its child process starts
            kind = "downloading"
        state = {"downloading": "Downloading", "queued": "Queued"}.get(kind, kind)
        if kind == "paused":
            state = PAUSED_BY_USER if j.id in self.user_paused else "Paused (earlier session)"
        elif kind == "failed":
            state = f"Failed: {j.error}" if j.error else "Failed"
        self._set_cells(row, ((2, f"{format_bytes(done)} / {format_bytes(total)}"), (3, speed), (4, eta),
                              (STATE_COL, state)))
        if kind == "paused":
            cell = self.job_table.item(row, STATE_COL)
            if cell is not None:
                cell.setToolTip(PAUSED_TIP)
        actions = self.row_actions(row)
        if actions is not None:
            actions.show_for(kind if kind in ("downloading", "queued", "paused", "failed") else "paused")

    def _paint_done(self, row: int, entry: ModelEntry) -> None:
        bar = self.job_table.cellWidget(row, 1)
        if isinstance(bar, QProgressBar):
            bar.setValue(1000)
        self._set_cells(row, ((2, format_bytes(entry.size)), (3, ""), (4, ""), (STATE_COL, VERIFIED)))
        state = self.job_table.item(row, STATE_COL)
        if state is not None:
            state.setToolTip(f"Every byte matched the sha256 the hub announced. Installed as {entry.name}.")
        actions = self.row_actions(row)
        if actions is not None:
            actions.show_for("done")
            actions.load.setToolTip(f"Switch the chat to {entry.name}")

    def _load(self, job_id: int) -> None:
        if job_id in self.done:
            self.load_requested.emit(self.done[job_id][1])

    def download(self, f: QuantFile) -> None:
        """Queue ``f`` and start it on the download lane (one download at a time)."""
        ops.database(self.workers, lambda: self.downloader.enqueue(f)).success(lambda job: self.resume(job.id)).run()

    def resume(self, job_id: int) -> None:
        if job_id in self.queued:
            return
        self.queued.add(job_id)
        self.user_paused.discard(job_id)
        post = self.workers.post

        def progress(p: Progress) -> None:
            post(lambda: self._progress(p))

        def work() -> ModelEntry:
            if job_id not in self.queued:  # paused or cancelled while it waited for the lane
                raise Stopped("pause")
            entry: ModelEntry = run_child(self.downloader, job_id, progress)
            return entry

        ops.download(self.workers, work).success(lambda entry: self._finished(job_id, entry)) \
            .failure(lambda exc: self._stopped(job_id, exc)).run()
        self.refresh()

    def _progress(self, p: Progress) -> None:
        if p.job_id not in self.queued:
            return  # a late report of a download that was paused or cancelled meanwhile
        self.live[p.job_id] = p
        row = self.row_of(p.job_id)
        job = self.jobs.get(p.job_id)
        if row >= 0 and job is not None:
            self._paint_job(row, job, p)

    def _finished(self, job_id: int, entry: ModelEntry) -> None:
        self.queued.discard(job_id)
        self.live.pop(job_id, None)
        job = self.jobs.get(job_id)
        self.done[job_id] = (_label(job) if job is not None else entry.name, entry)
        self.toast(f"Downloaded {entry.name} (sha256 verified). Load now on its row switches the chat to it.")
        self.finished.emit(entry)
        self.refresh()

    def _stopped(self, job_id: int, exc: BaseException) -> None:
        self.queued.discard(job_id)
        self.live.pop(job_id, None)
        if isinstance(exc, Stopped):
            self.toast("Download cancelled; the partial file was removed." if exc.reason == "cancel"
                       else "Download paused. Resume on its row continues where it stopped.")
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
        self.user_paused.add(job_id)
        self.downloader.pause(job_id)
        if not self.downloader.running(job_id):
            self.queued.discard(job_id)
            self.refresh()

    def cancel(self, job_id: int) -> None:
        self.downloader.cancel(job_id)
        if not self.downloader.running(job_id):
            self.queued.discard(job_id)
            self.refresh()
