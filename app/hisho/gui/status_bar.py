"""Status bar: model, device, speed of the last reply, time to first token, RAM in use (app + engine)."""

from __future__ import annotations

import os

import psutil
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from hisho.gui.performance_page import status_suffix

RAM_REFRESH_MS = 2000


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.model = QLabel("No model")
        self.device = QLabel("")
        self.speed = QLabel("— tok/s")
        self.ttft = QLabel("TTFT —")
        self.ram = QLabel("RAM —")
        self.addWidget(self.model)
        self.addWidget(self.device)
        for w in (self.speed, self.ttft, self.ram):
            self.addPermanentWidget(w)
        self.engine_pid: int | None = None
        self._proc = psutil.Process(os.getpid())
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.refresh_ram)
        self._timer.start(RAM_REFRESH_MS)
        self.refresh_ram()

    def set_model(self, name: str, n_ctx: int | None = None) -> None:
        self.model.setText(name + (f"  ·  {n_ctx:,} ctx" if n_ctx else ""))

    def set_device(self, engine_info: dict[str, object], gpu_layers: int) -> None:
        """CPU, or iGPU/GPU when llama.cpp can offload and layers are offloaded (hello's supports_gpu_offload)."""
        offload = bool(engine_info.get("supports_gpu_offload"))
        self.device.setText("GPU offload" if offload and gpu_layers else "CPU")
        self.device.setToolTip(str(engine_info.get("system_info", "")))

    def set_reply_figures(self, tokens_per_s: float | None, ttft_s: float | None) -> None:
        # The engine's thread policy (docs/threads.md): when it ran on fewer cores because other programs held
        # them, say so next to the speed, and why in the tooltip.
        engine = getattr(getattr(self.parent(), "ctx", None), "engine", None)
        threads = dict(getattr(engine, "threads", None) or {})
        suffix = status_suffix(threads) if tokens_per_s else ""
        self.speed.setText(f"{tokens_per_s:.1f} tok/s{suffix}" if tokens_per_s else "— tok/s")
        decode = threads.get("decode") or {}
        self.speed.setToolTip(f"{decode.get('threads')} of {decode.get('max')} CPU threads: {decode.get('why')}"
                              if decode else "")
        self.ttft.setText(f"TTFT {ttft_s * 1000:.0f} ms" if ttft_s else "TTFT —")

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
            self.ram.setText(f"RAM {self.ram_bytes() / 2**20:,.0f} MiB")
        except psutil.Error:
            self.ram.setText("RAM —")
