"""Documents in the window: drop zone, File → Summarize…, progress with stage/ETA/cancel, result as a conversation.

Rules of use: ``DocumentsController(window)`` once; the window places its ``action`` in the File menu and
connects its signals (``notice``: a line for the status bar; ``failed``: an error to report; ``ended``: the job
is over, queued messages may go; ``opened``: the result's conversation id, to show). It sees the window only
as ``SummaryWindow``: a parent for its dialogs and drop highlight, whose drops and close it watches, and a place
in the status bar for its progress. The job (the root's
``hisho.core.documents.service.Documents``) runs on the ``engine`` lane of the app's executor; progress comes
back through the executor's ``post``. The widgets here start no threads. When the job ends the result opens as
a conversation with the documents attached (``hisho.core.documents.ask``) and the status bar says how
questions about it are answered (whole document with precomputed KV, or most relevant parts). The chat hook
that adds a long document's relevant parts to a question is installed by the root, not here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from hisho.core.documents.extract import SUPPORTED
from hisho.core.documents.job import JobProgress, JobResult, SummaryJob, duration
from hisho.core.documents.overall import Overall, Shown
from hisho.gui import ops
from hisho.gui.chat.image_tray import is_image
from hisho.gui.shell.protocols import TOAST_MS, HasContext
from hisho.gui.shell.widgets import ElidedLabel

log = logging.getLogger("hisho.gui")

# Text files without a known extension (README, LICENSE) are read by content: "All files" lets them be chosen.
FILTER = "Documents (" + " ".join(f"*{s}" for s in SUPPORTED) + ");;All files (*)"


class DropOverlay(QLabel):
    """The highlight over the window while files are dragged over it."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__("Drop files to summarize them in a new chat\nPDF · DOCX · any text file (TXT, MD, HTML, "
                         "README…)\n\nDrop on the message box to attach them to this chat", parent)
        self.setObjectName("dropOverlay")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setStyleSheet("#dropOverlay { background: rgba(40, 110, 220, 60); border: 3px dashed #2a6edc;"
                           " border-radius: 12px; font-size: 20px; color: #1d4f9e; }")
        self.hide()

    def cover(self) -> None:
        parent = self.parentWidget()
        if parent is not None:
            self.setGeometry(parent.rect().adjusted(12, 12, -12, -12))
        self.raise_()
        self.show()


BAR_STEPS = 1000   # the bar's range: one whole summary (core.documents.overall), in tenths of a percent


class ProgressPanel(QWidget):
    """Stage text, one bar for the whole summary, the ETA and Cancel; lives in the status bar while a job runs.

    It never widens the window: the texts elide. The bar and the ETA come from ``core.documents.overall``: every
    stage has its share of one bar that never goes back (reading, combining, opening the chat), and the ETA
    follows the job's estimates smoothly and counts down between reports. ``row``, when set, gets
    "Summarizing a.pdf · 40 %" at each report (the line in the chat area)."""

    def __init__(self) -> None:
        super().__init__()
        self.stage = ElidedLabel("", 8)
        self.bar = QProgressBar()
        self.bar.setFixedWidth(110)
        self.bar.setRange(0, BAR_STEPS)
        self.eta = ElidedLabel("", 6)
        self.cancel = QPushButton("Cancel")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.stage, 1)  # the stage takes what is left once the ETA has its text's width
        row.addWidget(self.bar)
        row.addWidget(self.eta)
        row.addWidget(self.cancel)
        self.overall: Overall | None = None
        self.shown: Shown | None = None
        self.name = ""                 # what the chat-area line names ("a.pdf", "3 documents")
        self.row: Callable[[str], None] | None = None
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._show_eta)
        self.hide()

    def begin(self, files: int, name: str) -> None:
        """A new summary of ``files`` files: the bar starts at 0 %."""
        self.overall = Overall(files, time.monotonic())
        self.name = name

    def show_progress(self, p: JobProgress) -> None:
        if self.overall is None:
            self.begin(1, p.file)
        assert self.overall is not None
        if p.stage in ("reading", "writing", "saving"):   # the message names the phase ("Reading page 3 of 9")
            text = p.message or p.stage.capitalize()
        else:
            label = {"extracting": "Extracting", "planning": "Planning", "summarizing": "Summarizing",
                     "combining": "Combining", "done": "Opening the summary as a chat",
                     "opening": "Opening the summary as a chat", "cancelled": "Cancelled"}.get(
                         p.stage, p.stage.capitalize())
            text = f"{label}: {p.message}" if p.message else label
        self.stage.setText(f"{text} · {p.detail}" if p.detail else text)
        self.stage.setToolTip(self.stage.text())
        self.shown = self.overall.update(p, time.monotonic())
        self.bar.setValue(int(self.shown.fraction * BAR_STEPS))
        if self.row is not None and p.stage != "cancelled":
            self.row(self.row_text())
        self._show_eta()
        self._tick.start()
        self.show()

    def row_text(self) -> str:
        """"Summarizing a.pdf · 40 %": the chat area's line while a summary runs."""
        percent = self.shown.percent if self.shown is not None else 0
        return f"Summarizing {self.name} · {percent} %"

    def finish(self) -> None:
        self._tick.stop()
        self.overall, self.shown = None, None
        if self.row is not None:
            self.row("")
        self.eta.setText("")
        self.hide()

    def eta_text(self) -> str:
        """"about 2 min 10 s left"; nothing once the estimate has run out (the stage says what is happening:
        a frozen "finishing…" said nothing)."""
        if self.overall is None or self.shown is None or self.shown.stage in ("cancelled", "opened"):
            return ""
        left = self.overall.left(time.monotonic())
        return f"about {_duration(left)} left" if left >= 1 else ""

    def _show_eta(self) -> None:
        self.eta.setText(self.eta_text())


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def _place_row(window: object, row: QLabel) -> None:
    """Under the chat (above the message box), where the window has one: the column holding its ``pages``."""
    pages = getattr(window, "pages", None)
    parent = pages.parentWidget() if isinstance(pages, QWidget) else None
    box = parent.layout() if parent is not None else None
    if isinstance(box, QVBoxLayout) and pages is not None and box.indexOf(pages) >= 0:
        box.insertWidget(box.indexOf(pages) + 1, row)


class SummaryWindow(HasContext, Protocol):
    """What the summary uses of the window: ``window()``, the top-level widget (its dialogs' and the drop
    highlight's parent, where files are dropped and whose closing cancels the job), and the status bar."""

    def add_status_widget(self, widget: QWidget) -> None: ...   # kept at the status bar's right

    def window(self) -> QWidget: ...


class DocumentsController(QObject):
    notice = Signal(str, int)    # a line for the status bar, shown for so many ms
    failed = Signal(object)      # the job's exception: the window reports it as it reports its own
    ended = Signal()             # the job is over (done, cancelled or failed): messages waiting for it may go
    opened = Signal(int)         # the result's conversation: the window lists and shows it
    pictures_dropped = Signal(list)   # list[Path]: PNG/JPEG/WebP dropped on the window go with the next message

    def __init__(self, window: SummaryWindow) -> None:
        top = window.window()
        super().__init__(top)
        self.top = top
        self.ctx = window.ctx
        self.job: SummaryJob | None = None
        self.running = False
        self.job_name = ""
        self.last_result: JobResult | None = None
        self.last_conversation: int | None = None
        self.overlay = DropOverlay(top)
        self.panel = ProgressPanel()
        self.panel.cancel.clicked.connect(self.cancel)
        window.add_status_widget(self.panel)
        self.row = QLabel("")          # "Summarizing a.pdf · 40 %", in the chat area while a summary runs
        self.row.setObjectName("SummaryRow")
        self.row.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.row.hide()
        self.panel.row = self._show_row
        _place_row(window, self.row)
        top.setAcceptDrops(True)
        top.installEventFilter(self)
        # File → Summarize…: this controller owns the action (enabled while no summary runs); the window's
        # menu builder decides where it stands.
        self.action = QAction("Summarize…", self)
        self.action.setShortcut("Ctrl+Shift+O")
        self.action.triggered.connect(self.choose_files)

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
            pictures = [f for f in files if is_image(f)]
            documents = [f for f in files if not is_image(f)]
            if pictures:   # a picture is an attachment of the next message, never a document to summarize
                drop.acceptProposedAction()
                self.pictures_dropped.emit(pictures)
            if documents:
                drop.acceptProposedAction()
                self.summarize(documents)
            if files:
                return True
        return False

    def choose_files(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(self.top, "Summarize documents", "", FILTER)
        if names:
            self.summarize([Path(n) for n in names])

    # ----- the job ---------------------------------------------------------------------------------------

    def summarize(self, files: list[Path]) -> None:
        if self.running:
            self.notice.emit("A summary is already running; cancel it first.", TOAST_MS)
            return
        self.job_name = files[0].name if len(files) == 1 else f"{len(files)} documents"
        self.panel.begin(len(files), self.job_name)
        self.panel.show_progress(JobProgress("extracting", 0, len(files), 0.0, message=files[0].name))
        self.action.setEnabled(False)
        self.running = True
        ops.engine(self.ctx.executor, lambda: self._run(files)).success(self._done).failure(self._job_failed).run()
        log.info("summarizing %d files (%s)", len(files), ", ".join(f.name for f in files))

    def _run(self, files: list[Path]) -> tuple[JobResult, int | None, str]:
        """Engine lane: load the model if needed, run the job, open the result as a conversation."""
        self.ctx.ensure_loaded()   # nothing answers (the app's state): load the planned model
        # No reload for batching: the engine swaps in a job context per batch (one KV stream per sequence) in
        # the memory of the chat context, and makes the chat context again afterwards (core/documents/job.py).
        docs = self.ctx.documents
        job = docs.job(files, on_progress=self._progress_from_worker, ask_password=self.ask_password,
                        confirm=self._confirm_long)
        self.job = job
        result = docs.run(job)
        if not result.cancelled:
            self._progress_from_worker(JobProgress("opening", 0, 1, 0.0))
        cid, note = docs.open_result(result)
        return result, cid, note

    def ask_password(self, name: str, wrong: bool) -> str | None:
        """Worker thread: ask for an encrypted PDF's password on the GUI thread and wait for the answer.
        None (Cancel, or the window closing) skips the file; the summary then names it."""
        answer: list[str | None] = [None]
        done = threading.Event()

        def ask() -> None:
            try:
                prompt = (f"The password for {name} did not open it. Try again:" if wrong else
                          f"{name} is encrypted. Enter its password to summarize it:")
                text, ok = QInputDialog.getText(self.top, "Encrypted PDF", prompt, QLineEdit.EchoMode.Password)
                answer[0] = text if ok and text else None
            finally:
                done.set()

        self.ctx.executor.post(ask)
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
                    self.top, "Long summary",
                    f"{name} is about {chunks:,} chunks: roughly {duration(eta_s)} on this computer.\n\n"
                    "Start it? Finished chunks are kept, so you can cancel and resume later.")
                answer[0] = box == QMessageBox.StandardButton.Yes
            finally:
                done.set()

        self.ctx.executor.post(ask)
        while not done.wait(0.2):
            if self.job is not None and self.job.cancelled:
                return False
        return answer[0]

    def _show_row(self, text: str) -> None:
        self.row.setText(text)
        self.row.setVisible(bool(text) and self.row.parentWidget() is not None)

    def _progress_from_worker(self, p: JobProgress) -> None:
        self.ctx.executor.post(lambda: self.panel.show_progress(p))

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.panel.stage.setText("Stopping… what was read is kept")

    def _done(self, out: tuple[JobResult, int | None, str]) -> None:
        result, cid, note = out
        self.job, self.running = None, False
        self.last_result = result
        self.panel.finish()
        self.action.setEnabled(True)
        self.ended.emit()  # messages that waited for the summary go now
        if result.cancelled:
            self.notice.emit("Summary cancelled. What was read is kept: summarize the same file again to "
                             "resume.", TOAST_MS)
            return
        self.last_conversation = cid
        if cid is None:  # nothing could be read: say why, where the user looks, until dismissed
            why = "; ".join(result.skipped) or "no text found"
            self.notice.emit(f"Nothing to summarize. {why}", 30_000)
            return
        self.opened.emit(cid)
        skipped = f" Skipped: {'; '.join(result.skipped)}" if result.skipped else ""
        # A copied or looping summary is the model's limit, not the document's: the verdict is a banner over the
        # summary that stays (gui/chat/doc_sources.py); the notice only points to it.
        warn = " This model is too small for summaries: see the note over it." if result.quality_warning else ""
        warn += f" {result.context_note}" if result.context_note else ""
        self.notice.emit(f"Summary ready ({_duration(result.seconds)}).{warn} {note}{skipped}",
                         30_000 if skipped or warn else TOAST_MS)

    def _job_failed(self, exc: BaseException) -> None:
        self.job, self.running = None, False
        self.panel.finish()
        self.action.setEnabled(True)
        self.failed.emit(exc)
        self.ended.emit()
