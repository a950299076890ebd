"""Documents in the window: drop zone, File → Summarize…, progress with stage/ETA/cancel, result as a conversation.

Rules of use: ``DocumentsController(window)`` once, after the window's menus exist. The job runs on the
``engine`` lane of the window's one worker mechanism (``hisho.gui.bridge.Workers``); progress comes back
through the ``Bridge``. The widgets here start no threads. When the job ends the result opens as a
conversation with the documents attached (``hisho.core.documents.ask``) and the status bar says how questions
about it are answered (whole document with precomputed KV, or most relevant parts).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QWidget,
)

from hisho.core.db import DatabaseUnavailable
from hisho.core.documents.ask import DocumentContext, open_conversation, precompute_kv
from hisho.core.documents.cache import SummaryCache
from hisho.core.documents.extract import SUPPORTED
from hisho.core.documents.job import JobProgress, JobResult, SummaryJob, duration
from hisho.core.kv_session import document_owner

if TYPE_CHECKING:
    from hisho.gui.main_window import MainWindow

log = logging.getLogger("hisho.gui")

FILTER = "Documents (" + " ".join(f"*{s}" for s in SUPPORTED) + ")"


class DropOverlay(QLabel):
    """The highlight over the window while files are dragged over it."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__("Drop files to summarize\nPDF · DOCX · TXT · MD · RST · HTML", parent)
        self.setObjectName("dropOverlay")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setStyleSheet("#dropOverlay { background: rgba(40, 110, 220, 60); border: 3px dashed #2a6edc;"
                           " border-radius: 12px; font-size: 20px; color: #1d4f9e; }")
        self.hide()

    def cover(self) -> None:
        self.setGeometry(self.parentWidget().rect().adjusted(12, 12, -12, -12))
        self.raise_()
        self.show()


class ProgressPanel(QWidget):
    """Stage text, a progress bar, the ETA and Cancel; lives in the status bar while a job runs."""

    def __init__(self) -> None:
        super().__init__()
        self.stage = QLabel()
        self.bar = QProgressBar()
        self.bar.setFixedWidth(180)
        self.eta = QLabel()
        self.cancel = QPushButton("Cancel")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.stage, self.bar, self.eta, self.cancel):
            row.addWidget(w)
        self.hide()

    def show_progress(self, p: JobProgress) -> None:
        label = {"extracting": "Extracting", "planning": "Planning", "summarizing": "Summarizing",
                 "combining": "Combining"}.get(p.stage, p.stage.capitalize())
        self.stage.setText(f"{label}: {p.message}" if p.message else label)
        self.bar.setRange(0, max(1, p.total))
        self.bar.setValue(min(p.done, p.total))
        self.eta.setText(f"about {_duration(p.eta_s)} left" if p.eta_s > 0 else "")
        self.show()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class DocumentsController(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.ctx = window.ctx
        self.job: SummaryJob | None = None
        self.running = False
        self.last_result: JobResult | None = None
        self.last_conversation: int | None = None
        self.overlay = DropOverlay(window)
        self.panel = ProgressPanel()
        self.panel.cancel.clicked.connect(self.cancel)
        window.statusBar().addPermanentWidget(self.panel)
        window.setAcceptDrops(True)
        window.installEventFilter(self)
        self.action = window.file_menu.addAction("Summarize…")
        self.action.setShortcut("Ctrl+Shift+O")
        self.action.triggered.connect(self.choose_files)
        # Move the action up, next to the other file actions (before the separator above Quit).
        actions = window.file_menu.actions()
        window.file_menu.insertAction(actions[1] if len(actions) > 2 else actions[-1], self.action)
        self._cache: SummaryCache | None = None
        self.ctx.service.before_prompt.append(self._before_prompt)

    # ----- entry points --------------------------------------------------------------------------------

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        kind = event.type()
        if kind == QEvent.Type.Close and self.job is not None:
            self.job.cancel()  # finished chunks are kept; a password prompt the job waits on ends too
        elif kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            drag: QDragEnterEvent = event  # type: ignore[assignment]
            if drag.mimeData().hasUrls():
                drag.acceptProposedAction()
                self.overlay.cover()
                return True
        elif kind == QEvent.Type.DragLeave:
            self.overlay.hide()
        elif kind == QEvent.Type.Drop:
            drop: QDropEvent = event  # type: ignore[assignment]
            self.overlay.hide()
            files = [Path(u.toLocalFile()) for u in drop.mimeData().urls() if u.isLocalFile()]
            if files:
                drop.acceptProposedAction()
                self.summarize(files)
                return True
        return False

    def choose_files(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(self.window, "Summarize documents", "", FILTER)
        if names:
            self.summarize([Path(n) for n in names])

    # ----- the job ---------------------------------------------------------------------------------------

    def summarize(self, files: list[Path]) -> None:
        if self.running:
            self.window.controller.toast("A summary is already running; cancel it first.")
            return
        self.panel.show_progress(JobProgress("extracting", 0, len(files), 0.0, message=files[0].name))
        self.action.setEnabled(False)
        self.running = True
        self.ctx.workers.submit("engine", lambda: self._run(files), done=self._done, failed=self._failed)
        log.info("summarizing %d files (%s)", len(files), ", ".join(f.name for f in files))

    def _run(self, files: list[Path]) -> tuple[JobResult, int | None, str]:
        """Engine lane: load the model if needed, run the job, open the result as a conversation."""
        engine = self.ctx.engine
        if engine.load_params is None and self.ctx.load_params is not None:
            engine.load(self.ctx.load_params)
        # No reload for batching: the engine swaps in a job context per batch (one KV stream per sequence) in
        # the memory of the chat context, and makes the chat context again afterwards (core/documents/job.py).
        cache = self._summary_cache()
        job = SummaryJob(engine, files, cache=cache, on_progress=self._progress_from_worker,
                         ask_password=self._ask_password, confirm=self._confirm_long)
        self.job = job
        result = job.run()
        if result.cancelled or not result.documents:
            return result, None, ""
        n_ctx = int(engine.load_info.get("n_ctx", 0))
        cid, att = open_conversation(self.ctx.store, cache.db, result.extracted, result.summary,
                                     engine.count_tokens, n_ctx, result.parts)
        if att.approach == "whole":
            conv = self.ctx.store.get(cid)
            prefix = [{"role": "system", "content": conv.system_prompt}]
            prefix += [{"role": m.role, "content": m.content} for m in self.ctx.store.branch(cid)]
            # KV persistence (hisho.core.kv_chat): save the prefix under the document, so the first question
            # restores it even after a restart; the index finds saved prefixes by their tokens.
            session = getattr(self.ctx.extras.get("kv"), "session", None)
            precompute_kv(engine, prefix, session, document_owner(result.extracted[0].sha256))
        return result, cid, att.note

    def _ask_password(self, name: str, wrong: bool) -> str | None:
        """Worker thread: ask for an encrypted PDF's password on the GUI thread and wait for the answer.
        None (Cancel, or the window closing) skips the file; the summary then names it."""
        answer: list[str | None] = [None]
        done = threading.Event()

        def ask() -> None:
            try:
                prompt = (f"The password for {name} did not open it. Try again:" if wrong else
                          f"{name} is encrypted. Enter its password to summarize it:")
                text, ok = QInputDialog.getText(self.window, "Encrypted PDF", prompt, QLineEdit.EchoMode.Password)
                answer[0] = text if ok and text else None
            finally:
                done.set()

        self.ctx.bridge.post(ask)
        while not done.wait(0.2):
            if self.job is not None and self.job.cancelled:
                return None
        return answer[0]

    def _confirm_long(self, name: str, chunks: int, eta_s: float) -> bool:
        """Worker thread: ask on the GUI thread whether to start a summary estimated to take long."""
        answer = [False]
        done = threading.Event()

        def ask() -> None:
            try:
                box = QMessageBox.question(
                    self.window, "Long summary",
                    f"{name} is about {chunks:,} chunks: roughly {duration(eta_s)} on this computer.\n\n"
                    "Start it? Finished chunks are kept, so you can cancel and resume later.")
                answer[0] = box == QMessageBox.StandardButton.Yes
            finally:
                done.set()

        self.ctx.bridge.post(ask)
        while not done.wait(0.2):
            if self.job is not None and self.job.cancelled:
                return False
        return answer[0]

    def _progress_from_worker(self, p: JobProgress) -> None:
        self.ctx.bridge.post(lambda: self.panel.show_progress(p))

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.panel.stage.setText("Cancelling… finished chunks are kept")

    def _done(self, out: tuple[JobResult, int | None, str]) -> None:
        result, cid, note = out
        self.job, self.running = None, False
        self.last_result = result
        self.panel.hide()
        self.action.setEnabled(True)
        if result.cancelled:
            self.window.controller.toast("Summary cancelled. Finished chunks are kept: summarize the same file "
                                         "again to resume.")
            return
        skipped = f" Skipped: {'; '.join(result.skipped)}" if result.skipped else ""
        self.last_conversation = cid
        if cid is not None:
            self.window.controller.refresh(select=cid)
            self.window.controller.select(cid)
        self.window.controller.toast(f"Summary ready ({_duration(result.seconds)}). {note}{skipped}")

    def _failed(self, exc: BaseException) -> None:
        self.job, self.running = None, False
        self.panel.hide()
        self.action.setEnabled(True)
        self.window.controller.report(exc)

    # ----- questions about an attached document ------------------------------------------------------------

    def _summary_cache(self) -> SummaryCache:
        if self._cache is None:
            self._cache = SummaryCache(self.ctx.store.db)
        return self._cache

    def _before_prompt(self, turn: Any, messages: list[dict[str, str]]) -> None:
        """ChatService hook (worker thread): long documents get their relevant parts added to the question.
        A store that cannot hold the documents tables (read-only, too new) has no attachments: chats go on."""
        try:
            db = self._summary_cache().db
        except DatabaseUnavailable as exc:
            log.info("no document attachments: %s", exc)
            return
        engine = self.ctx.engine
        DocumentContext(db, engine.count_tokens, lambda: int(engine.load_info.get("n_ctx", 0)))(turn, messages)
