"""Screenshots of what the window recommends, each at 1280×720 and at 700 px wide, light and dark:

- ``24a-first-start-measuring-*``: the first-run card before this computer's speed is measured (no pick);
- ``24-first-start-pick-*``: the card once a speed profile exists (a recorded 2-core laptop's figures: the 7B
  fits its memory but would answer at ~4 tok/s, so a smaller model is offered and the card says why);
- ``25-hub-suggestions-*``: the Hub tab's first list on the same machine, the card's pick starred first;
- ``26-summary-wait-*``: a summary combining its parts: one bar, the ETA, and the line under the chat.

Nothing comes from the internet (the hub is never asked); measuring at start is off so the shots do not wait on
a probe child.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import run_alone

SIZES = ((1280, 720, "1280x720"), (700, 720, "700px"))
# A 2-core laptop-class machine (the test suite's recorded profile): a 7B Q4_K_M decodes at about 4 tok/s.
LAPTOP = {"bandwidth": 21_500_000_000, "step_s": 0.005, "prompt_rate": {"Q4_K": 79e9, "Q4_0": 95e9},
          "threads": 2, "source": "screenshots: a 2-core laptop-class machine"}


def _variants(app: Any, widget: Any, out: Path, stem: str) -> None:
    from hisho.gui.shell import theme

    for name, th in (("light", theme.LIGHT), ("dark", theme.DARK)):
        theme.apply(app, th)
        for w, h, label in SIZES:
            widget.resize(w, h)
            wait_until(app, lambda: False, timeout=0.4)
            widget.grab().save(str(out / f"{stem}-{label}-{name}.png"))
    theme.apply(app, theme.LIGHT)


def recommend_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.core.planner import speed
    from hisho.gui.models import hub_best
    from hisho.gui.models.models_page import open_models

    card = getattr(window, "first_start", None)
    if card is None:
        return
    window.show_empty(True)
    card.unmeasured = False
    card.waiting_for_speed()
    wait_until(app, lambda: not card.isHidden(), timeout=60)
    _variants(app, window, out, "24a-first-start-measuring")
    profile = speed.SpeedProfile.from_dict(LAPTOP)
    speed.save_profile(profile)
    card.speed_landed(profile)
    wait_until(app, lambda: card.candidate is not None, timeout=60)
    _variants(app, window, out, "24-first-start-pick")
    page = open_models(window, "Hub")
    page.tabs.setCurrentWidget(page.hub)
    hub_best.show_best(page.hub)
    wait_until(app, lambda: page.hub.results.count() > 0 and "★" in page.hub.status.text(), timeout=60)
    _variants(app, window if page.window() is window else page, out, "25-hub-suggestions")
    page.close()
    _wait_shots(app, window, out)


def _wait_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.core.documents.progress import JobProgress

    window.show_page("chats")
    window.show_empty(True)
    panel = window.documents.panel
    name = "harbour-report.pdf"
    panel.begin(1, name)
    for done in (0, 40, 80, 80):
        panel.show_progress(JobProgress("summarizing", done, 80, 150.0, name, f"chunk {done} of 80"))
    panel.show_progress(JobProgress("combining", 3, 10, 70.0, name, "combine step 3 of 10",
                                    detail="2,310 of 7,700 tokens read"))
    _variants(app, window, out, "26-summary-wait")
    panel.finish()


def main(argv: list[str]) -> int:
    """These screenshots alone (``python -m hisho_dev.recommend_shots OUT_DIR``), in a throw-away HISHO_HOME."""
    os.environ["HISHO_MEASURE_AT_START"] = "0"
    os.environ["HF_HUB_OFFLINE"] = "1"
    return run_alone(argv, recommend_shots, "2[456]*.png")


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
