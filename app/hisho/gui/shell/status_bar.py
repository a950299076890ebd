"""Status bar (model, device, the engine's queue, reply speed, time to first token, RAM) and the header's context
meter. The queue ("summarizing report.pdf · 2 waiting") is the app's state (``Now.queue``), hidden when idle.

Rules of use: nothing here may widen the window. Labels elide their text to the room they get (``ElidedLabel``)
and ask for little minimum width; whatever is added later (the summary's progress) must do the same. When the bar
is too narrow for everything at its natural width (a summary running at 1280 px, a narrow window), the least
useful figures step aside whole (``DROP_ORDER``) before anything is cut: a label cut to "C…" or "TT…" says
nothing. Reply figures are live while a reply streams (``set_reply_figures(..., live=True)``) and final
afterwards.
"""

from __future__ import annotations

import os

import psutil
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QStatusBar, QWidget

from hisho.core.appstate import Queue
from hisho.core.conversations.chat import FitReport
from hisho.core.units import MIB, wait_text
from hisho.gui.settings.performance_page import status_suffix
from hisho.gui.shell.widgets import ElidedLabel

RAM_REFRESH_MS = 2000


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.model = ElidedLabel("No model", 8)
        self.device = ElidedLabel("", 3)
        self.speed = ElidedLabel("— tok/s", 5)
        self.ttft = ElidedLabel("TTFT —", 5)
        self.ram = ElidedLabel("RAM —", 5)
        self.queue = ElidedLabel("", 6)
        self.queue.setObjectName("WorkQueue")
        self.queue.setToolTip("What the engine works on now, and how many jobs and API requests wait for it")
        self.queue.hide()
        self.speed.setToolTip("Speed of the reply (live while it streams)")
        self.ttft.setToolTip("Time to first token: from Send to the reply's first word, the reading of your "
                             "message included")
        # A model load's Stop, beside "Loading X… 45 % · 3 s" while a load runs (the controller shows it).
        self.stop_load = QPushButton("Stop")
        self.stop_load.setObjectName("Flat")
        self.stop_load.setToolTip("Stop loading this model; the model that answered before loads again")
        self.stop_load.setAccessibleName("Stop loading the model")
        self.stop_load.hide()
        self.addWidget(self.model)
        self.addWidget(self.stop_load)
        self.addWidget(self.device)
        for w in (self.queue, self.speed, self.ttft, self.ram):
            self.addPermanentWidget(w)
        self.engine_pid: int | None = None
        self._proc = psutil.Process(os.getpid())
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.refresh_ram)
        self._timer.start(RAM_REFRESH_MS)
        # Stepped aside first to last when room is short: the device ("CPU"), then TTFT, RAM, the model (the
        # header names it too). The speed, the summary's progress and the KV label stay.
        self.drop_order: list[QLabel] = [self.device, self.ttft, self.ram, self.model]
        self._dropped: set[QLabel] = set()
        self._refit_timer = QTimer(self)
        self._refit_timer.setSingleShot(True)
        self._refit_timer.setInterval(0)
        self._refit_timer.timeout.connect(self.refit)
        self.messageChanged.connect(self._refit_timer.start)
        self.refresh_ram()

    def event(self, e: QEvent) -> bool:
        # A label's new text, a widget added or shown (the summary's progress), a new width: fit again, once.
        if e.type() in (QEvent.Type.LayoutRequest, QEvent.Type.Resize):
            self._refit_timer.start()
        return super().event(e)

    def refit(self) -> None:
        """Show every item whole if there is room; else let ``drop_order`` step aside, one by one, until the
        rest fit (what still does not fit elides). Counts every item at its natural width, dropped or not, so
        the answer does not depend on what was hidden before."""
        items = [w for w in self.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
                 if not w.isWindow() and (not w.isHidden() or w in self._dropped)]
        if self.currentMessage():  # QStatusBar hides the left-hand items under a message: leave those alone
            items = [w for w in items if w not in (self.model, self.device)]
        shown = [w for w in items if not w.isHidden()]
        lay = self.layout()
        gap = 6  # between two items (QStatusBar's own spacing is private; Fusion's is about this)
        # What the bar needs with every item shown: its layout's own count for what shows now (margins and
        # spacing included) plus what the stepped-aside items would add back.
        now = lay.totalSizeHint().width() if lay is not None else sum(w.sizeHint().width() + gap for w in shown)
        need = now + sum(w.sizeHint().width() + gap for w in items if w.isHidden()) + 4
        room = self.width()
        drop: set[QLabel] = set()
        loading = not self.stop_load.isHidden()   # "Loading X… 45 %" stays beside its Stop (it elides instead)
        for label in self.drop_order:
            if loading and label is self.model:
                continue
            if need <= room:
                break
            if label in items:
                drop.add(label)
                need -= label.sizeHint().width() + gap
        for label in self.drop_order:
            if label in items and (label in drop) != (label in self._dropped):
                label.setVisible(label not in drop)
        self._dropped = {w for w in self._dropped if w not in items} | drop

    def show_queue(self, queue: Queue) -> None:
        """What the engine works on and what waits (the app's state); hidden when nothing does."""
        self.queue.setText(queue.label)
        self.queue.setVisible(not queue.idle)

    def set_model(self, name: str, n_ctx: int | None = None) -> None:
        self.model.setText(name + (f"  ·  {n_ctx:,} ctx" if n_ctx else ""))
        self.model.setToolTip(self.model.text())

    def set_device(self, engine_info: dict[str, object], gpu_layers: int) -> None:
        """CPU, or iGPU/GPU when llama.cpp can offload and layers are offloaded (hello's supports_gpu_offload)."""
        offload = bool(engine_info.get("supports_gpu_offload"))
        self.device.setText("GPU offload" if offload and gpu_layers else "CPU")
        self.device.setToolTip(str(engine_info.get("system_info", "")))

    def set_reply_figures(self, tokens_per_s: float | None, ttft_s: float | None, live: bool = False,
                          answer_s: float | None = None) -> None:
        """The reply's speed and first-token time; ``live``: it is still streaming (figures so far);
        ``answer_s``: a reasoning model's time to its answer's first word (its thinking came first).

        The engine's thread policy (docs/threads.md): when it ran on fewer cores because other programs held
        them, say so next to the speed, and why in the tooltip."""
        engine = getattr(getattr(self.parent(), "ctx", None), "engine", None)
        threads = dict(getattr(engine, "threads", None) or {})
        suffix = status_suffix(threads) if tokens_per_s else ""
        if tokens_per_s:
            self.speed.setText(f"{tokens_per_s:.1f} tok/s{suffix}" + (" (live)" if live else ""))
        else:
            self.speed.setText("… tok/s" if live else "— tok/s")
        decode = threads.get("decode") or {}
        self.speed.setToolTip(f"{decode.get('threads')} of {decode.get('max')} CPU threads: {decode.get('why')}"
                              if decode else "")
        if ttft_s:
            answer = f" · answer {wait_text(answer_s)}" if answer_s else ""
            self.ttft.setText(f"TTFT {wait_text(ttft_s)}{answer}")
        else:
            self.ttft.setText("TTFT …" if live else "TTFT —")

    def ram_bytes(self) -> int:
        total = self._proc.memory_info().rss
        if self.engine_pid:
            try:
                total += psutil.Process(self.engine_pid).memory_info().rss
            except psutil.Error:
                pass
        return int(total)

    def refresh_ram(self) -> None:
        try:
            self.ram.setText(f"RAM {self.ram_bytes() / MIB:,.0f} MiB")
        except psutil.Error:
            self.ram.setText("RAM —")


class ContextMeter(QWidget):
    """The header's "how full is this chat's context" bar and its figures."""

    TIP = ("Context used by this chat: what the model reads for the next reply — system prompt, earlier "
           "messages, your draft and the chat template's markers around each message.")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setObjectName("ContextMeter")
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(90)
        self.bar.setRange(0, 1000)
        self.label = ElidedLabel("", 8)
        self.label.setObjectName("Meta")
        self.label.setAlignment(Qt.AlignmentFlag.AlignRight)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.bar)
        self.live = False

    def show_unknown(self, text: str = "") -> None:
        self.live = False
        self.bar.setValue(0)
        self._warn(False)
        self.label.setText(text)
        self.bar.setToolTip(self.TIP)

    def show_fit(self, fit: FitReport, live: bool = False) -> None:
        self.live = live
        self.bar.setValue(int(min(1.0, fit.fraction) * 1000))
        self._warn(fit.warn)
        state = "" if not fit.warn else " · almost full" if fit.fits else " · no longer fits"
        self.label.setText(f"{fit.prompt_tokens:,} / {fit.n_ctx:,} tokens{state}")
        self.label.setToolTip(("With the reply streaming so far. " if live else "") + self.TIP)
        self.bar.setToolTip(self.TIP + ("" if not fit.warn else " Nearly full: when it no longer fits you choose "
                                        "what happens — a new chat from a summary, or dropping the oldest turns. "
                                        "Nothing is cut silently."))

    def _warn(self, on: bool) -> None:
        self.bar.setProperty("warn", "true" if on else "false")
        self.bar.style().unpolish(self.bar)
        self.bar.style().polish(self.bar)
