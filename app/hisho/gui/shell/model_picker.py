"""The model picker in the chat header: one click shows the installed models; choosing one loads it and says
what that costs. Also opens the Models page to find more.

Rules of use: ``attach_picker(window)`` once, after the header is built. The list is read on the ``store`` lane
each time the menu is about to open (a fresh download shows up without a restart); the load itself is the
controller's ``switch_model`` (engine lane).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QBoxLayout, QMenu, QSizePolicy, QToolButton

from hisho.core.models.names import entry_name
from hisho.core.models.store import ModelEntry, ModelStore, is_base_model
from hisho.core.units import GIB, format_bytes
from hisho.gui import ops
from hisho.gui.shell.pages import ShowsPages
from hisho.gui.shell.remote_switch import RemoteWindow
from hisho.gui.shell.widgets import ElidedLabel


class ModelNameLabel(ElidedLabel):
    """The loaded model's name in the header. The picker's button shows it (one control, the name, that
    switches model), so the label itself stays hidden and says when its text changes."""

    changed = Signal(str)

    def __init__(self) -> None:
        super().__init__("", 6)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt naming
        super().setText(text)
        self.changed.emit(text)


class PickerWindow(ShowsPages, RemoteWindow, Protocol):
    """What the picker uses of the main window (choosing a remote model switches there: ``RemoteWindow``)."""


class PickerHost(PickerWindow, Protocol):
    """Where ``attach_picker`` puts it: beside the model's name in the header, kept on the window."""

    model_picker: ModelPicker | None

    @property
    def model_label(self) -> ModelNameLabel: ...

NAME_MAX = 240   # px: a long file name is elided on the button, whole in its tooltip
MIN_NAME = 60


def _label(e: ModelEntry, base: bool = False) -> str:
    bits = " · ".join(b for b in (e.arch, e.quant, format_bytes(e.size), "base model" if base else "") if b)
    return f"{entry_name(e).display}    {bits}"


def _listing(store: ModelStore) -> tuple[list[ModelEntry], set[str]]:
    """The installed models and which are base models (their headers say; read on the store lane)."""
    entries = store.list()
    return entries, {str(e.path) for e in entries if is_base_model(e.path)}


class ModelPicker(QToolButton):
    def __init__(self, window: PickerWindow) -> None:
        super().__init__()
        self.window_ = window
        self.setObjectName("Flat")
        self.setText("Switch model")  # the button draws its own menu arrow
        self.setToolTip("Choose the model that answers (Ctrl+M: the Models page)")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self.entries: list[ModelEntry] = []
        self.base: set[str] = set()     # paths of the entries that are base models
        self.remote: list[Any] = []     # (Endpoint, ServerInfo) of the remote engines that answered
        self.full_name = ""
        self.room = NAME_MAX
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)  # it may get less than asked
        self.menu_.aboutToShow.connect(self.refresh)
        self._fill()

    def show_name(self, text: str | None = None, room: int | None = None) -> None:
        """The button shows the model's name, elided in the middle (quant and extension stay) to the room it has
        (at most ``room`` px): it asks for that much, and for little as its minimum, so a long name never widens
        the window."""
        if text is not None:
            self.full_name = text
        if room is not None:
            self.room = room
        name = self.full_name
        self.setToolTip((f"{name}\n\n" if name else "") + "Switch model (Ctrl+M: the Models page)")
        self.updateGeometry()
        self._elide()

    def _elide(self) -> None:
        name = self.full_name or "Switch model"
        fits = max(MIN_NAME, min(self.room, self.width() - self._padding()))
        super().setText(self.fontMetrics().elidedText(name, Qt.TextElideMode.ElideMiddle, fits))

    def _padding(self) -> int:
        return super().sizeHint().width() - self.fontMetrics().horizontalAdvance(self.text())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        hint = super().sizeHint()
        name = self.full_name or "Switch model"
        # 2 px over the text's advance: elidedText measures in fractions and cut a name given exactly its width
        width = min(self.fontMetrics().horizontalAdvance(name) + 2, self.room) + self._padding()
        return QSize(width, hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt naming
        return QSize(MIN_NAME + self._padding(), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt naming
        super().resizeEvent(event)
        self._elide()

    def refresh(self) -> None:
        models = self.window_.ctx.models
        ex = self.window_.ctx.executor
        ops.database(ex, lambda: _listing(models)).success(self._listed).run()
        from hisho.gui.shell.remote_switch import reachable

        ops.remote(ex, reachable).success(self._reached).latest("picker").run()

    def _reached(self, found: list[Any]) -> None:
        self.remote = found
        self._fill()

    def _listed(self, listing: tuple[list[ModelEntry], set[str]]) -> None:
        self.entries, self.base = listing
        self._fill()

    def _fill(self) -> None:
        m = self.menu_
        m.clear()
        now = self.window_.state.now   # what answers (or loads) now is the ticked entry
        if self.remote:
            m.addSection("This computer")
        for e in self.entries:
            act = m.addAction(_label(e, str(e.path) in self.base))
            act.setCheckable(True)
            act.setChecked(not now.remote and bool(now.path) and same_file(e.path, now.path))
            act.triggered.connect(lambda _=False, entry=e: self.choose(entry))
        for ep, info in self.remote:               # grouped by engine (Settings → Engines)
            m.addSection(f"{ep.name} — {info.kind}")
            for model in info.models:
                act = m.addAction(model)
                act.setCheckable(True)
                act.setChecked(now.engine == ep.name and now.model.id == model)
                act.triggered.connect(lambda _=False, ep=ep, model=model: self.choose_remote(ep, model))
        if self.entries:
            m.addSeparator()
        from hisho.gui.models.models_page import open_models

        m.addAction("Find more models…").triggered.connect(lambda: open_models(self.window_, "Hub"))

    def choose_remote(self, ep: Any, model: str) -> None:
        from hisho.gui.shell.remote_switch import use_remote

        use_remote(self.window_, ep, model)

    def choose(self, e: ModelEntry) -> None:
        now = self.window_.state.now
        if not now.remote and now.path and same_file(now.path, e.path):
            return
        c = self.window_.controller
        c.switch_model(e.name)                      # the built-in engine answers again (Services.switch_model)
        c.toast(f"Loading {e.name} ({e.size / GIB:.1f} GiB: a few seconds from an SSD). KV snapshots saved with "
                "other models are kept and used again when you switch back.")


def attach_picker(window: PickerHost) -> ModelPicker:
    """Put the picker in the chat header where the model's name is: the button shows that name."""
    picker = ModelPicker(window)

    window.model_label.changed.connect(picker.show_name)
    window.state.changed.connect(lambda _now: picker._fill())   # the tick follows a switch at once
    header = window.model_label.parentWidget()
    lay = header.layout() if header is not None else None
    assert isinstance(lay, QBoxLayout)   # the header's row
    lay.insertWidget(lay.indexOf(window.model_label) + 1, picker)
    window.model_picker = picker
    return picker


def same_file(a: str, b: str) -> bool:
    """The store and the engine may spell one file two ways (a symlinked folder, a relative path)."""
    return a == b or os.path.realpath(a) == os.path.realpath(b)
