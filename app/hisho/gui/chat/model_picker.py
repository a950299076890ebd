"""The model picker in the chat header: one click shows the installed models; choosing one loads it and says
what that costs. Also opens the Models page to find more.

Rules of use: ``attach_picker(window)`` once, after the header is built. The list is read on the ``store`` lane
each time the menu is about to open (a fresh download shows up without a restart); the load itself is the
controller's ``switch_model`` (engine lane).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QMenu, QToolButton

from hisho.core.models.store import ModelEntry, ModelStore
from hisho.core.units import GIB, format_bytes


def _label(e: ModelEntry) -> str:
    bits = " · ".join(b for b in (e.arch, e.quant, format_bytes(e.size)) if b)
    return f"{e.name}    {bits}"


class ModelPicker(QToolButton):
    def __init__(self, window: Any) -> None:
        super().__init__()
        self.window_ = window
        self.setObjectName("Flat")
        self.setText("Switch model")  # the button draws its own menu arrow
        self.setToolTip("Choose the model that answers (Ctrl+M: the Models page)")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self.entries: list[ModelEntry] = []
        self.remote: list[Any] = []     # (Endpoint, ServerInfo) of the remote engines that answered
        self.menu_.aboutToShow.connect(self.refresh)
        self._fill()

    def refresh(self) -> None:
        self.window_.ctx.executor.submit("store", lambda: ModelStore().list(), done=self._listed)
        from hisho.gui.shell.remote_switch import reachable

        self.window_.ctx.executor.submit("remote", reachable, done=self._reached, key="picker")

    def _reached(self, found: list[Any]) -> None:
        self.remote = found
        self._fill()

    def _listed(self, entries: list[ModelEntry]) -> None:
        self.entries = entries
        self._fill()

    def _fill(self) -> None:
        m = self.menu_
        m.clear()
        params = self.window_.ctx.engine.load_params
        current = str(params.model_path) if params is not None else ""
        remote_on = bool(self.window_.ctx.engine.engine_info.get("remote"))
        if self.remote:
            m.addSection("This computer")
        for e in self.entries:
            act = m.addAction(_label(e))
            act.setCheckable(True)
            act.setChecked(bool(current) and e.path == current and not remote_on)
            act.triggered.connect(lambda _=False, entry=e: self.choose(entry))
        for ep, info in self.remote:               # grouped by engine (Settings → Engines)
            m.addSection(f"{ep.name} — {info.kind}")
            for model in info.models:
                act = m.addAction(model)
                act.setCheckable(True)
                act.setChecked(remote_on and current == model and
                               self.window_.ctx.engine.engine_info.get("engine") == ep.name)
                act.triggered.connect(lambda _=False, ep=ep, model=model: self.choose_remote(ep, model))
        if self.entries:
            m.addSeparator()
        from hisho.gui.models.models_page import open_models

        m.addAction("Find more models…").triggered.connect(lambda: open_models(self.window_, "Hub"))

    def choose_remote(self, ep: Any, model: str) -> None:
        from hisho.gui.shell.remote_switch import use_remote

        use_remote(self.window_, ep, model)

    def choose(self, e: ModelEntry) -> None:
        params = self.window_.ctx.engine.load_params
        remote_on = bool(self.window_.ctx.engine.engine_info.get("remote"))
        if params is not None and str(params.model_path) == e.path and not remote_on:
            return
        c = self.window_.controller
        c.switch_model(e.name)                      # the built-in engine answers again first (use_local)
        c.toast(f"Loading {e.name} ({e.size / GIB:.1f} GiB: a few seconds from an SSD). KV snapshots saved with "
                "other models are kept and used again when you switch back.")


def attach_picker(window: Any) -> ModelPicker:
    """Put the picker in the chat header, right of the model's name."""
    picker = ModelPicker(window)
    header = window.model_label.parentWidget()
    lay = header.layout()
    lay.insertWidget(lay.indexOf(window.model_label) + 1, picker)
    window.model_picker = picker
    return picker
