"""At first start (no speed profile kept) the machine is measured once in the background, so the first-run card
says a speed without a bench (``hisho.core.planner.first_speed``: a probe child, a few seconds, never the GUI
thread). It starts once the first local model answers (the load and the measurement would share the cores),
on its own lane; the card says "Measuring this computer…" meanwhile and offers again with the speed once the
profile lands (the Models page and the hub's badges read it when they next look).

Rules of use: ``start_first_measure(window)`` once, after ``attach_first_start``. GUI thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hisho.core.planner.speed import SpeedProfile
from hisho.gui import ops

if TYPE_CHECKING:
    from hisho.core.appstate import Now

log = logging.getLogger("hisho.gui")


class FirstMeasure:
    """Waits for the first local model to answer, then measures on the ``measure`` lane (once)."""

    def __init__(self, window: Any) -> None:
        self.w = window
        self.started = False
        self.profile: SpeedProfile | None = None

    def follow(self, now: Now) -> None:
        if self.started or now.remote or not now.path or not now.loaded or now.loading:
            return
        self.started = True
        from hisho.core.models.store import bundled_model_path

        model = bundled_model_path() or Path(now.path)
        post = self.w.ctx.executor.post

        def work() -> SpeedProfile | None:
            from hisho.core.planner import first_speed

            if not first_speed.wanted():
                return None
            post(lambda: self._card_call("measuring"))
            return first_speed.measure_and_keep(model)

        ops.measurement(self.w.ctx.executor, work).success(self._landed).failure(self._failed).run()

    def _card_call(self, name: str, *args: Any) -> None:
        card = getattr(self.w, "first_start", None)
        if card is not None:
            getattr(card, name)(*args)

    def _landed(self, profile: SpeedProfile | None) -> None:
        """The profile measured, or None where none was measured (one was kept already, or measuring at start is
        turned off: the card, still without one, then says how to measure)."""
        self.profile = profile
        self._card_call("speed_landed", profile)

    def _failed(self, exc: BaseException) -> None:
        log.info("first-start speed measurement failed: %s", exc)
        self._card_call("speed_landed", None)


def start_first_measure(window: Any) -> FirstMeasure:
    measure = FirstMeasure(window)
    window.state.changed.connect(measure.follow)
    measure.follow(window.state.now)
    window.first_measure = measure  # tests reach it here
    return measure
