"""The memory planner panel: which model it plans for, a stacked bar (weights / KV / compute / kept / runtime,
each named in words by ``planner.explain``) against
the budget, a context slider and a KV type that re-price the bar live, the settings shown with the plan's
reason, and a button that uses them (the page saves them: ``hisho.gui.models.planner_page``).

A model on a remote engine (docs/remote-engines.md) is not priced against this computer's memory: the panel says
"runs on <engine>" and shows only what that server reported (``show_remote``).

Rules of use: ``PlannerPanel.show_plan(plan, calibration)`` on the GUI thread with a plan made elsewhere (making
one reads a GGUF header and may run llama.cpp's dry run: seconds, so never on the GUI thread; the planner page
runs it on a worker lane). Moving the slider only does the planner's arithmetic (microseconds), so it runs
on the GUI thread directly.
"""

from __future__ import annotations

import html
import logging
from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from hisho.core.planner import Calibration, Plan, as_loaded, explain
from hisho.core.planner.memory import CELL_PAD
from hisho.core.planner.speed import Speed
from hisho.core.settings import MAX_CTX
from hisho.core.units import GIB
from hisho.gui.models.fit_grid import FitGrid, ask
from hisho.gui.shell import theme

log = logging.getLogger("hisho.gui")

SEGMENTS = (("weights", "#4e79a7"), ("kv", "#f28e2b"), ("compute", "#59a14f"), ("kept", "#b07aa1"),
            ("runtime", "#9c9c9c"), ("load", "#c9c9c9"))


def segments_of(plan: Plan) -> dict[str, int]:
    """Bytes per bar segment for the plan's fit metric (``explain.rows``): they add up to exactly what the text
    says is needed (``plan.need``)."""
    parts = {r.key: r.bytes for r in explain.rows(plan)}
    return {name: parts.get(name, 0) for name, _colour in SEGMENTS}


def over_trained(plan: Plan) -> str:
    """A warning when the context is longer than the model was trained on (with the file's rope scaling), or
    "" (``explain.over_trained``: ``hisho plan`` says the same)."""
    head, detail = explain.over_trained(plan)
    return f"<br><b>{html.escape(head)}</b>: {html.escape(detail)}" if head else ""


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
        p.fillRect(QRectF(0, 0, w, h), QColor(theme.current().hover))  # the track follows the theme
        x, scale = 0.0, self.scale()
        for name, color in SEGMENTS:
            width = w * self.parts.get(name, 0) / scale
            p.fillRect(QRectF(x, 0, width, h), QColor(color))
            x += width
        if self.budget:
            bx = w * self.budget / scale
            p.setPen(QPen(QColor(theme.current().error), 3))
            p.drawLine(int(bx) - 1, 0, int(bx) - 1, int(h))
        p.end()



KV_CHOICES = (("f16", "f16 KV (exact)"), ("q8_0", "q8_0 KV (half the memory)"), ("q4_0", "q4_0 KV (a quarter)"))


class PlannerPanel(QWidget):
    """What one model needs at the context and KV type shown, against this computer's budget. The bar, its
    legend and the line under it are drawn from the same priced plan (``current``), so they say the same
    numbers. ``apply_requested(n_ctx, kv_type)``: the user asked to use what is shown."""

    apply_requested = Signal(int, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Memory planner")
        self.plan: Plan | None = None
        self.current: Plan | None = None
        self.calib: Calibration | None = None
        self.subject = QLabel("")
        self.subject.setObjectName("PlannerSubject")
        self.subject.setWordWrap(True)
        self.subject.setTextFormat(Qt.TextFormat.RichText)
        self.bar = MemoryBar()
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.choice = QLabel("Planning…")
        self.choice.setWordWrap(True)
        self.choice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.reason = QLabel()
        self.reason.setObjectName("Meta")
        self.reason.setWordWrap(True)
        self.ctx_label = QLabel()
        self.ctx_label.setTextFormat(Qt.TextFormat.RichText)  # the over-trained warning is bold
        self.ctx_label.setWordWrap(True)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setEnabled(False)
        self.slider.valueChanged.connect(self._reprice)
        self.kv_type = QComboBox()
        for name, label in KV_CHOICES:
            self.kv_type.addItem(label, name)
        self.kv_type.setEnabled(False)
        self.kv_type.currentIndexChanged.connect(lambda _i: self._reprice(self.slider.value()))
        self.apply = QPushButton("Use this context and KV type")
        self.apply.setObjectName("Primary")
        self.apply.setEnabled(False)
        self.apply.setToolTip("Save them in Settings; they are used from the next model load")
        self.apply.clicked.connect(self._apply)
        self.grid = FitGrid()
        self.grid.chosen.connect(self._pick)
        self.grid_title = QLabel("What fits at other contexts and KV types (click one to see it above)")
        self.grid_title.setObjectName("Meta")
        self.controls = QWidget()
        rows = QVBoxLayout(self.controls)
        rows.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("Context"))
        row.addWidget(self.slider, 1)
        choose = QHBoxLayout()
        choose.addWidget(QLabel("KV cache"))
        choose.addWidget(self.kv_type)
        choose.addStretch(1)
        choose.addWidget(self.apply)
        rows.addLayout(row)
        rows.addLayout(choose)
        layout = QVBoxLayout(self)
        layout.setSpacing(10)
        for widget in (self.subject, self.choice, self.bar, self.legend, self.ctx_label, self.controls, self.reason,
                       self.grid_title, self.grid):
            layout.addWidget(widget)
        self.grid.hide()
        self.grid_title.hide()
        layout.addStretch(1)

    def show_plan(self, plan: Plan, calib: Calibration | None = None, fast: Speed | None = None) -> None:
        """Show ``plan``; the slider spans 256 tokens to the model's trained context; ``fast``: the model's
        speed here, for the grid's cells."""
        self.plan, self.calib = plan, calib
        for widget in (self.bar, self.legend, self.slider, self.controls, self.grid, self.grid_title):
            widget.show()
        top = plan.facts.context_length if plan.facts and plan.facts.context_length else plan.config.n_ctx
        for widget in (self.slider, self.kv_type):
            widget.blockSignals(True)
        # Past the trained context only as the user's choice, with a warning (``_show``): up to 4x it.
        self.slider.setRange(1, max(1, min(4 * top, MAX_CTX) // CELL_PAD))
        self.slider.setValue(max(1, plan.config.n_ctx // CELL_PAD))
        index = self.kv_type.findData(plan.config.type_k)
        self.kv_type.setCurrentIndex(max(0, index))
        for widget in (self.slider, self.kv_type):
            widget.blockSignals(False)
        self.slider.setEnabled(plan.facts is not None)
        self.kv_type.setEnabled(plan.facts is not None)
        vision = f"\n{plan.vision.line(plan.config.n_ctx)}" if plan.vision is not None else ""
        self.reason.setText(plan.reason + "\n" + plan.budget.explain + vision)
        self.grid.show_for(plan, calib, fast)
        self.grid_title.setText("What fits at other contexts and KV types (click one to see it above)" + (
            f"; speeds {fast.how} for this computer" if fast is not None else ""))
        self._show(plan)

    def show_remote(self, engine: dict[str, Any], loaded: dict[str, Any]) -> None:
        """A remote model: where it runs and what its server told us; no bar, no slider (nothing here to plan)."""
        self.plan = self.current = None
        name, model = str(engine.get("engine", "")), str(loaded.get("model", ""))
        for widget in (self.bar, self.legend, self.slider, self.controls, self.grid, self.grid_title):
            widget.hide()
        self.subject.setText(f"Planning for <b>{html.escape(model)}</b>")
        self.choice.setText(f"<b>{html.escape(model)}</b> runs on <b>{html.escape(name)}</b>")
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

    def _pick(self, n_ctx: int, kv_type: str) -> None:
        self.kv_type.blockSignals(True)
        self.set_kv_type(kv_type)
        self.kv_type.blockSignals(False)
        self.set_context(n_ctx)
        self._reprice(self.slider.value())

    def set_kv_type(self, name: str) -> None:
        self.kv_type.setCurrentIndex(max(0, self.kv_type.findData(name)))

    def _reprice(self, value: int) -> None:
        if self.plan is None or self.plan.facts is None:
            return
        kv = str(self.kv_type.currentData() or self.plan.config.type_k)
        cfg = ask(self.plan, value * CELL_PAD, kv)
        self._show(as_loaded(self.plan.facts, cfg, self.plan.budget, self.calib, cpu=self.plan.cpu))

    def _show(self, shown: Plan) -> None:
        self.current = shown
        named = explain.rows(shown)
        parts = segments_of(shown)
        self.bar.set_parts(parts, shown.budget.ram)
        colours = dict(SEGMENTS)
        self.legend.setText("<br>".join(f"<span style='color:{colours[r.key]}'>■</span> {r.bytes / GIB:.2f} GiB "
                                        f"· {html.escape(r.label)}" for r in named if r.bytes))
        c = shown.config
        chosen = self.plan is not None and c == self.plan.config
        self.choice.setText(
            f"<b>{shown.quant}</b> · {c.n_ctx} tokens · KV {c.type_k}/{c.type_v} · flash attention "
            f"{'on' if c.flash_attn else 'off'} · {c.n_gpu_layers} GPU layers"
            + (" · the planner's choice" if chosen else "")
            + ("" if shown.fits else " · <b>does not fit</b>") + (" · estimate" if shown.breakdown.estimate else ""))
        verdict = "fits" if shown.fits else "does NOT fit"
        self.ctx_label.setText(f"Context {c.n_ctx} tokens: {shown.budget.metric} "
                               f"{sum(parts.values()) / GIB:.2f} GiB of {self.bar.budget / GIB:.2f} GiB — {verdict}"
                               + over_trained(shown))
        self.apply.setEnabled(self.plan is not None and self.plan.facts is not None)

    def _apply(self) -> None:
        if self.current is not None:
            self.apply_requested.emit(self.current.config.n_ctx, self.current.config.type_k)
