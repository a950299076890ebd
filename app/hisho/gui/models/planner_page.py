"""The Memory planner page of the window (View → Memory planner, the rail's "Memory").

It plans the model that is loaded, or a hub file being considered on the Models page's Hub tab ("Plan memory"):
the panel shows which one. "Use this context and KV type" saves what the panel shows as that model's own choice
(settings ``model_choices``: other models keep theirs) and offers to reload the model with them now; for a hub file, which is not on this computer yet,
the button downloads it instead.

Rules of use: GUI thread. Plans are made on the ``engine`` lane for a local file (the dry run may take seconds)
and on the ``hub`` lane for a hub file (range reads of its header); results come back through the executor.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from hisho.core.hub import QuantFile
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.models.store import ModelEntry
from hisho.core.planner import Calibration, Plan
from hisho.core.planner.speed import Speed
from hisho.gui import ops
from hisho.gui.models.planner_panel import PlannerPanel
from hisho.gui.shell.pages import ShowsPages
from hisho.gui.shell.protocols import HasController, HasState

if TYPE_CHECKING:
    from hisho.gui.models.hub_tab import HubTab

log = logging.getLogger("hisho.gui")


class PlannerWindow(ShowsPages, HasController, HasState, Protocol):
    """What the page uses of the main window."""


class PlannerPage(PlannerPanel):
    def __init__(self, window: PlannerWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.w = window
        self.hub_file: QuantFile | None = None   # planning a hub file, not the loaded model
        self.planned_for = ""                     # the loaded file (or remote model) the plan is for
        self.plans = 0                            # plans shown so far (tests wait on it)
        title = QLabel("Memory planner")
        title.setObjectName("PageTitle")
        self.back_to_loaded = QPushButton("Plan the loaded model")
        self.back_to_loaded.setObjectName("Flat")
        self.back_to_loaded.hide()
        self.back_to_loaded.clicked.connect(self.plan_loaded)
        head = QHBoxLayout()
        head.addWidget(title)
        head.addStretch(1)
        head.addWidget(self.back_to_loaded)
        lay = self.layout()
        assert isinstance(lay, QVBoxLayout)
        lay.setContentsMargins(24, 16, 24, 16)
        lay.insertLayout(0, head)
        self.apply_requested.connect(self.use_shown)
        self.installed_as = ""                    # the hub file planned is installed already, under this name
        window.state.changed.connect(self._answering)

    def _answering(self, _now: object) -> None:
        """Another model answers: a page in sight plans it at once (hidden, it does when shown)."""
        if self.isVisible():
            self.follow_loaded()

    # ----- what is planned -------------------------------------------------------------------------------

    def follow_loaded(self) -> None:
        """On showing the page: plan the loaded model again if it changed (a hub plan stays until left)."""
        if self.hub_file is None and self._loaded_key() != self.planned_for:
            self.plan_loaded()

    def _loaded_key(self) -> str:
        return self.w.state.now.key   # what answers now: the local file, or remote:<engine>:<model>

    def plan_loaded(self) -> None:
        self.hub_file = None
        self.back_to_loaded.hide()
        self.planned_for = key = self._loaded_key()
        engine = self.w.ctx.engine
        if self.w.state.now.remote:
            self.show_remote(dict(engine.engine_info), dict(engine.load_info))
            return
        if not key:
            self.subject.setText("No model is loaded: choose one in the chat header or on the Models page.")
            return
        self.subject.setText(f"Planning for <b>{html.escape(Path(key).name)}</b> · the model in use")
        self.choice.setText("Planning…")
        spec = [key]

        loaded_ctx = self.w.state.now.n_ctx or None
        models = self.w.ctx.models

        def work() -> Planned:
            from hisho.core.planner import facts_for

            return _plan_for(facts_for(spec, models)[0], loaded_ctx)

        ops.engine(self.w.ctx.executor, work).success(lambda r: self._planned(key, r)).failure(self._failed).run()

    def plan_hub_file(self, f: QuantFile) -> None:
        """Plan ``f`` (not downloaded: its header is read from the hub) and show it here."""
        self.hub_file = f
        self.installed_as = ""
        self.planned_for = key = f"hf:{f.repo}/{f.name}"
        self.back_to_loaded.show()
        self.subject.setText(f"Planning for <b>{html.escape(f.name)}</b> · {html.escape(f.repo)} on the hub, "
                             "not downloaded")
        self.choice.setText("Reading its header from the hub…")

        models = self.w.ctx.models

        def work() -> tuple[Planned, str]:
            from hisho.core.hub.fit import file_facts

            return _plan_for(file_facts(f)[0]), installed_name(models.list(), f)

        def done(result: tuple[Planned, str]) -> None:
            if key != self.planned_for:
                return
            self.installed_as = result[1]
            if self.installed_as:
                self.subject.setText(f"Planning for <b>{html.escape(f.name)}</b> · {html.escape(f.repo)}, "
                                     f"installed here as <b>{html.escape(self.installed_as)}</b> (same sha256)")
            self._planned(key, result[0])

        ops.hub(self.w.ctx.executor, work).success(done).failure(self._failed).run()

    def _planned(self, key: str, result: Planned) -> None:
        if key != self.planned_for:
            return  # another model was asked for since
        plan, calib, fast = result
        self.show_plan(plan, calib, fast)
        if fast is not None:  # how fast it answers here, said beside what it needs
            self.reason.setText(f"Speed here ({fast.how}): {fast.label()}, ~{fast.decode_4k:.0f} tok/s 4K tokens "
                                f"into a chat\n{self.reason.text()}")
        if self.hub_file is None:
            self.apply.setText("Use this context and KV type")
        else:   # the same bytes are on this computer already: loading them is what is left to do
            self.apply.setText(f"✓ Installed as {self.installed_as} · Load" if self.installed_as
                               else "Download this file")
        self.plans += 1

    def _failed(self, exc: BaseException) -> None:
        self.choice.setText(f"No plan: {exc}")

    # ----- using what is shown ---------------------------------------------------------------------------

    def use_shown(self, n_ctx: int, kv_type: str) -> None:
        if self.hub_file is not None and self.installed_as:
            self.w.controller.switch_model(self.installed_as)
            return
        if self.hub_file is not None:
            from hisho.gui.models.models_page import open_models

            open_models(self.w, "Downloads").download(self.hub_file)
            return
        settings, c = self.w.ctx.settings, self.w.controller
        model = self.planned_for if self.planned_for and not self.planned_for.startswith("remote:") else ""
        if not model:
            return
        try:
            settings.choose(model, n_ctx=n_ctx, kv_type=kv_type)  # this model's own: others keep theirs
        except ValueError as exc:
            c.toast(f"Not saved: {exc}")
            return
        ops.save_settings(self.w.ctx.executor, settings).failure(c.report).run()
        c.toast(f"{Path(model).name}: context {n_ctx:,} tokens and {kv_type} KV from its next load.",
                lambda: c.switch_model(model), label="Reload now", ms=15_000)


Planned = tuple[Plan, Calibration | None, Speed | None]  # the plan, its calibration, its speed here


def installed_name(entries: list[ModelEntry], f: QuantFile) -> str:
    """The installed model with the same bytes as hub file ``f`` (the same sha256 for every part), or ""."""
    if not f.sha256 or not all(f.sha256):
        return ""
    wanted = ",".join(f.sha256)
    return next((e.name for e in entries if e.sha256 == wanted), "")


def _plan_for(facts: ModelFacts, n_ctx: int | None = None) -> Planned:
    """The plan of one model for the window's profile at ``n_ctx`` (the loaded context; None: the settings'),
    whether ``facts`` come from a hub header or a file (the same search, dry run and rules:
    ``planner.plan_facts``), and the calibration the panel re-prices with. Runs on a worker lane (a first dry
    run takes seconds)."""
    from hisho.core.planner import calibration_for, plan_facts, speed
    from hisho.gui.models.models_page import planner_budget

    budget, opts = planner_budget()
    target = n_ctx or opts["target_ctx"]
    wanted = min(target, facts.context_length or target)
    plan = plan_facts([facts], opts["machine"], budget, min_ctx=min(opts["min_ctx"], wanted),
                      target_ctx=target, n_batch=opts["n_batch"], n_ubatch=opts["n_batch"])
    return (plan, calibration_for(facts, run=False, n_ubatch=opts["n_batch"]),
            speed.for_model(facts, speed.load_profile()))


def open_planner(window: ShowsPages) -> PlannerPage:
    """View → Memory planner: the page, planning the loaded model (unless a hub file is being planned)."""
    page = window.show_page("planner")
    assert isinstance(page, PlannerPage)
    return page


def offer_planning(window: ShowsPages, hub: HubTab) -> None:
    """The Hub tab's "Plan memory" button: the selected file on the Memory planner page."""
    button = QPushButton("Plan memory for this file")
    button.setObjectName("Flat")
    button.setToolTip("See on the Memory planner page what the selected file needs here, at any context")
    button.setEnabled(False)

    def selected() -> QuantFile | None:
        rows = hub.files.selectionModel().selectedRows() if hub.files.selectionModel() else []
        row = rows[0].row() if rows else -1
        return hub.fits[row].file if 0 <= row < len(hub.fits) else None

    def plan() -> None:
        f = selected()
        if f is not None:
            page = open_planner(window)
            page.plan_hub_file(f)

    hub.files.itemSelectionChanged.connect(lambda: button.setEnabled(selected() is not None))
    button.clicked.connect(plan)
    host = hub.files.parentWidget()
    lay = host.layout() if host is not None else None
    if isinstance(lay, QVBoxLayout):
        lay.insertWidget(lay.indexOf(hub.files) + 1, button)
    hub.plan_button = button  # type: ignore[attr-defined]  # for tests and the screenshots
