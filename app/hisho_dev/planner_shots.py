"""``python -m hisho_dev.planner_shots OUT_DIR [SPEED_PROFILE.json]``: the Hub tab's first list (the models best for
this computer, with fit and speed badges) and the Memory planner page, light and dark, at 1280×720 and 700 px
wide.

Offscreen, in a throw-away HISHO_HOME, on the bundled model. Speeds need this machine's speed profile (``hisho
bench speed``); without one measured here the recorded profile given (or the slow-laptop fixture) is stored in
the throw-away home, so the badges show what such a machine would see. No network: the best list is estimated
from published sizes. Each PNG is named ``<screen>-<theme>-<size>.png``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import offscreen_1280x720, place

SIZES = (("1280x720", 1280, 720), ("700px", 700, 720))
FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "speed" / "slow_laptop.json"


def _hub(app: Any, window: Any, out: Path, tag: str) -> None:
    from hisho.gui.models.models_page import open_models

    page = open_models(window, "Hub")
    wait_until(app, lambda: page.hub.results.count() > 0 and "Best for this computer" in page.hub.status.text(),
               timeout=60)
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / f"hub-best-{tag}.png"))
    window.host.back()


def _planner(app: Any, window: Any, out: Path, tag: str) -> None:
    page = window.show_page("planner")
    wait_until(app, lambda: page.plans > 0, timeout=120)
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / f"planner-{tag}.png"))
    window.host.back()


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    offscreen_1280x720()
    os.environ["HISHO_HOME"] = tempfile.mkdtemp(prefix="hisho-shots-")
    from hisho.core.planner import speed

    recorded = speed.load_profile(Path(argv[1]) if len(argv) > 1 else FIXTURE)
    if recorded is not None:
        speed.save_profile(recorded)
    from hisho.gui.shell.app import application, open_window

    app = application()
    window = open_window(None)
    place(window, 1280, 720)
    window.show()
    c = window.controller
    wait_until(app, lambda: c.model_ready, timeout=600)
    for theme_name in ("light", "dark"):
        c.set_theme(theme_name)
        for size, width, height in SIZES:
            place(window, width, height)
            wait_until(app, lambda: False, timeout=0.3)
            _hub(app, window, out, f"{theme_name}-{size}")
            _planner(app, window, out, f"{theme_name}-{size}")
    c.set_theme("system")
    window.close()
    sys.stdout.write(f"wrote {len(list(out.glob('*.png')))} screenshots to {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
