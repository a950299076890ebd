"""The memory planner panel: a stacked bar (weights / KV / compute / other) against the budget, a context slider
that re-prices the bar live, and the chosen settings with the plan's reason.

A model on a remote engine (docs/remote-engines.md) is not priced against this computer's memory: the panel says
"runs on <engine>" and shows only what that server reported (``show_remote``).

Rules of use: ``PlannerPanel.show_plan(plan, calibration)`` on the GUI thread with a plan made elsewhere (making
one reads a GGUF header and may run llama.cpp's dry run: seconds, so never on the GUI thread; ``open_planner``
runs it on the engine lane). Moving the slider only does the planner's arithmetic (microseconds), so it runs
on the GUI thread directly.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QSlider, QVBoxLayout, QWidget

from hisho.core.planner import Calibration, Config, Plan, price
from hisho.core.planner.memory import CELL_PAD
from hisho.core.units import GIB

log = logging.getLogger("hisho.gui")

SEGMENTS = (("weights", "#4e79a7"), ("kv", "#f28e2b"), ("compute", "#59a14f"), ("other", "#9c9c9c"))


def segments_of(plan: Plan) -> dict[str, int]:
    """Bytes per bar segment for the plan's fit metric. Compute counts what that metric counts (the touched part
    for resident); "other" is the output buffer and the runtime overhead."""
    b = plan.breakdown
    need = plan.need
    other = b.output + b.runtime
    compute = max(0, need - b.weights - b.kv - other)
    return {"weights": b.weights, "kv": b.kv, "compute": compute, "other": other}


class MemoryBar(QWidget):
    """Stacked horizontal bar scaled to max(budget, need), with the budget as a vertical line."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: dict[str, int] = {}
        self.budget = 0
        self.setMinimumHeight(36)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_parts(self, parts: dict[str, int], budget: int) -> None:
        self.parts, self.budget = dict(parts), budget
        self.setToolTip(" · ".join(f"{k} {v / GIB:.2f} GiB" for k, v in parts.items())
                        + f" · budget {budget / GIB:.2f} GiB")
        self.update()

    def scale(self) -> float:
        total = sum(self.parts.values())
        return float(max(total, self.budget, 1))

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt naming)
        p = QPainter(self)
        w, h = float(self.width()), float(self.height())
        p.fillRect(QRectF(0, 0, w, h), QColor("#e8e8e8"))
        x, scale = 0.0, self.scale()
        for name, color in SEGMENTS:
            width = w * self.parts.get(name, 0) / scale
            p.fillRect(QRectF(x, 0, width, h), QColor(color))
            x += width
        if self.budget:
            bx = w * self.budget / scale
            p.setPen(QPen(QColor("#d62728"), 3))
            p.drawLine(int(bx) - 1, 0, int(bx) - 1, int(h))
        p.end()


class PlannerPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Memory planner")
        self.plan: Plan | None = None
        self.current: Plan | None = None
        self.calib: Calibration | None = None
        self.bar = MemoryBar()
        self.legend = QLabel()
        self.choice = QLabel("Planning…")
        self.choice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        self.ctx_label = QLabel()
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setEnabled(False)
        self.slider.valueChanged.connect(self._reprice)
        layout = QVBoxLayout(self)
        for widget in (self.choice, self.bar, self.legend, self.ctx_label, self.slider, self.reason):
            layout.addWidget(widget)
        layout.addStretch(1)
        self.resize(560, 260)

    def show_plan(self, plan: Plan, calib: Calibration | None = None) -> None:
        """Show ``plan``; the slider spans 256 tokens to the model's trained context."""
        self.plan, self.calib = plan, calib
        top = plan.facts.context_length if plan.facts and plan.facts.context_length else plan.config.n_ctx
        self.slider.blockSignals(True)
        self.slider.setRange(1, max(1, top // CELL_PAD))
        self.slider.setValue(max(1, plan.config.n_ctx // CELL_PAD))
        self.slider.blockSignals(False)
        self.slider.setEnabled(plan.facts is not None)
        c = plan.config
        self.choice.setText(
            f"<b>{plan.quant}</b> · {c.n_ctx} tokens · KV {c.type_k}/{c.type_v} · flash attention "
            f"{'on' if c.flash_attn else 'off'} · {c.n_gpu_layers} GPU layers"
            + ("" if plan.fits else " · <b>does not fit</b>") + (" · estimate" if plan.breakdown.estimate else ""))
        self.reason.setText(plan.reason + "\n" + plan.budget.explain)
        self._show(plan)

    def show_remote(self, engine: dict[str, Any], loaded: dict[str, Any]) -> None:
        """A remote model: where it runs and what its server told us; no bar, no slider (nothing here to plan)."""
        self.plan = self.current = None
        name, model = str(engine.get("engine", "")), str(loaded.get("model", ""))
        for widget in (self.bar, self.legend, self.slider):
            widget.hide()
        self.choice.setText(f"<b>{model}</b> runs on <b>{name}</b>")
        server = f"{engine.get('kind', '')} {engine.get('version', '')}".strip() or "an OpenAI-compatible server"
        n_ctx = int(loaded.get("n_ctx") or 0)
        self.ctx_label.setText(f"Context {n_ctx:,} tokens, " + ("as the server reports it" if loaded.get(
            "n_ctx_reported") else "from your setting (the server does not say)"))
        resume = ("it saves and restores long chats' slots" if loaded.get("slot_save")
                  else "resuming long chats is its own job")
        self.reason.setText(f"{name} ({server} at {engine.get('url', '')}) holds this model in its own memory, "
                            f"so this computer's RAM is not planned for it; {resume}.")

    def set_context(self, n_ctx: int) -> None:
        self.slider.setValue(max(1, n_ctx // CELL_PAD))

    def _reprice(self, value: int) -> None:
        if self.plan is None or self.plan.facts is None:
            return
        n_ctx = value * CELL_PAD
        cfg = Config(**{**self.plan.config.__dict__, "n_ctx": n_ctx})
        self._show(price(self.plan.facts, cfg, self.plan.budget, self.calib))

    def _show(self, shown: Plan) -> None:
        self.current = shown
        parts = segments_of(shown)
        self.bar.set_parts(parts, shown.budget.ram)
        self.legend.setText("   ".join(f"<span style='color:{color}'>■</span> {name} {parts[name] / GIB:.2f} GiB"
                                       for name, color in SEGMENTS))
        verdict = "fits" if shown.fits else "does NOT fit"
        self.ctx_label.setText(f"Context {shown.config.n_ctx} tokens: {shown.budget.metric} "
                               f"{shown.need / GIB:.2f} GiB of {shown.budget.ram / GIB:.2f} GiB — {verdict}")


def open_planner(window: Any) -> PlannerPanel:
    """Open the panel as its own window and make the plan for the loaded model on the engine lane."""
    panel = PlannerPanel(window)
    panel.setWindowFlag(Qt.WindowType.Window, True)
    # On the window's screen, whole: no larger than its free area, centred on the window (it opened half off a
    # 1440 px screen when placed by the window manager alone).
    free = window.screen().availableGeometry()
    hint = panel.sizeHint()
    panel.resize(min(max(hint.width(), 560), free.width() - 40), min(max(hint.height(), 420), free.height() - 60))
    panel.show()  # first: the frame's size is known once it is shown
    frame = panel.frameGeometry()
    frame.moveCenter(window.frameGeometry().center())
    frame.moveLeft(max(free.left(), min(frame.left(), free.left() + free.width() - frame.width())))
    frame.moveTop(max(free.top(), min(frame.top(), free.top() + free.height() - frame.height())))
    panel.move(frame.topLeft())
    engine = window.ctx.engine
    if engine.engine_info.get("remote"):
        panel.show_remote(dict(engine.engine_info), dict(engine.load_info))
        return panel
    params = getattr(getattr(window, "ctx", None), "load_params", None)
    spec = [params.model_path] if params is not None else []

    def work() -> tuple[Plan, Calibration | None]:
        from hisho.core import machine as machine_mod
        from hisho.core import settings as settings_mod
        from hisho.core.planner import calibration_for, facts_for, make_plan

        s = settings_mod.load()
        m = machine_mod.detect()
        plan = make_plan(spec, m, m.budget(), min_ctx=int(s["min_ctx"]), target_ctx=int(s["n_ctx"]))
        calib = calibration_for(facts_for(spec)[0], run=False)
        return plan, calib

    def done(result: tuple[Plan, Calibration | None]) -> None:
        panel.show_plan(*result)

    def failed(exc: BaseException) -> None:
        panel.choice.setText(f"No plan: {exc}")

    window.controller.executor.submit("engine", work, done=done, failed=failed)
    return panel
