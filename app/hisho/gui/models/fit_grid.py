"""The planner page's "what fits" grid: the model priced at a few contexts (rows) and KV types (columns), each
cell the memory needed and whether it fits the budget, and, where the model's speed here is known, how fast a
reply comes once that context is full; a click shows that cell on the bar.

Rules of use: ``FitGrid.show_for(plan, calibration)`` on the GUI thread: it only does the planner's arithmetic
(``as_loaded``, microseconds a cell). ``chosen(n_ctx, kv_type)`` is emitted on a click.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from hisho.core.planner import Calibration, Config, Plan, as_loaded
from hisho.core.planner.speed import Speed, decode_when_full
from hisho.core.units import GIB
from hisho.gui.shell import theme

CONTEXTS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
KV_TYPES = ("f16", "q8_0", "q4_0")


def ask(plan: Plan, n_ctx: int, kv: str) -> Config:
    """What a load of ``plan``'s model asks for at ``n_ctx`` tokens of ``kv`` KV: the plan's request (flash
    attention and ubatch as the settings say, before the load's rules) with those two changed. Priced through
    ``as_loaded``, a cell says what the load will run and need, not what the plan's own context needed."""
    base = plan.requested
    flash = base.flash_attn or kv != "f16"  # quantized V needs flash attention
    return Config(**{**base.__dict__, "n_ctx": n_ctx, "type_k": kv, "type_v": kv, "flash_attn": flash})


class FitGrid(QTableWidget):
    chosen = Signal(int, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(KV_TYPES), parent)
        self.setObjectName("FitGrid")
        self.setHorizontalHeaderLabels([f"{k} KV" for k in KV_TYPES])
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.cellClicked.connect(self._clicked)
        self.contexts: list[int] = []

    def show_for(self, plan: Plan, calib: Calibration | None, fast: Speed | None = None) -> None:
        """Price every cell; with ``fast`` (the model's speed here) each also says how fast a reply comes once
        that context is full (``speed.decode_when_full``)."""
        if plan.facts is None:
            self.setRowCount(0)
            return
        top = plan.facts.context_length or plan.config.n_ctx
        self.contexts = [n for n in CONTEXTS if n < top] + [top]
        self.setRowCount(len(self.contexts))
        self.setVerticalHeaderLabels([f"{n:,} tokens" for n in self.contexts])
        for row, n_ctx in enumerate(self.contexts):
            for col, kv in enumerate(KV_TYPES):
                p = as_loaded(plan.facts, ask(plan, n_ctx, kv), plan.budget, calib, cpu=plan.cpu)
                text = f"{p.need / GIB:.2f} GiB · " + ("fits" if p.fits else "does not fit")
                if fast is not None:
                    text += f"\n~{decode_when_full(plan.facts, fast, n_ctx, kv):.0f} tok/s when full"
                item = QTableWidgetItem(text)
                if not p.fits:  # fits: the palette's text colour, which follows a theme change
                    item.setForeground(QColor(theme.current().error))
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setToolTip(p.reason)
                self.setItem(row, col, item)
        self.resizeRowsToContents()
        height = self.horizontalHeader().height() + sum(self.rowHeight(r) for r in range(self.rowCount())) + 4
        self.setFixedHeight(height)

    def _clicked(self, row: int, col: int) -> None:
        if 0 <= row < len(self.contexts):
            self.chosen.emit(self.contexts[row], KV_TYPES[col])
