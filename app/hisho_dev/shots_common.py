"""What the screenshot scripts share (``hisho_dev.screenshots`` and its shot modules): the sample conversation's
texts and placing the window. The shot modules import it, never ``screenshots`` (which runs them), so the
scripts import one another in one direction only."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SAMPLE_USER = "How do I read a large CSV file in Python without running out of memory?"
SAMPLE_REPLY = """Read it **in chunks** instead of all at once. Two good options:

### 1. The standard library

```python
import csv

def rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            yield row          # one row in memory at a time

total = sum(float(r["amount"]) for r in rows("sales.csv"))
```

### 2. pandas with `chunksize`

| approach | memory | speed |
|---|---|---|
| `csv` module | tiny | good |
| `pandas` chunks | bounded | fast |
| `pandas` whole file | the whole file | fastest, if it fits |

- Pick a chunk size such as `100_000` rows.
- Aggregate each chunk, then combine the partial results.

> Tip: pass `usecols=[...]` so pandas only parses the columns you need."""
SAMPLE_FOLLOWUP = "Thanks! And to filter rows by date?"
SAMPLE_REPLY2 = ("Parse the column as dates while reading — `pd.read_csv(path, parse_dates=[\"date\"], "
                 "chunksize=100_000)` — then keep `chunk[chunk.date >= \"2024-01-01\"]` from each chunk.")


def place(window: Any, width: int, height: int) -> None:
    """The window, frame included, ``width``×``height`` at the top left of the screen's free area (at 1280×720:
    the whole screen, as a maximized window)."""
    free = window.screen().availableGeometry()
    dx = window.frameGeometry().width() - window.geometry().width()
    dy = window.frameGeometry().height() - window.geometry().height()
    window.resize(min(width, free.width()) - dx, min(height, free.height()) - dy)
    window.move(free.topLeft())


def offscreen_1280x720() -> None:
    """On Qt's offscreen platform, a 1280×720 screen (its default is 800×800), so "within the screen" is checked
    at that size. Call before the application is made."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if os.environ["QT_QPA_PLATFORM"] == "offscreen":
        screens = Path(tempfile.mkdtemp(prefix="hisho-shots-screen-")) / "screens.json"
        screens.write_text('{"screens": [{"name": "shots", "x": 0, "y": 0, "width": 1280, "height": 720, '
                           '"logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}', encoding="utf-8")
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={screens}"


def run_alone(argv: list[str], shots: Callable[[Any, Any, Path], None], pattern: str) -> int:
    """One shot module by itself (``python -m hisho_dev.NAME OUT_DIR``): a throw-away HISHO_HOME, the window at
    1280×720 with the bundled model loaded, ``shots(app, window, out)``, then a line saying how many PNGs
    matching ``pattern`` the folder holds."""
    from hisho_dev.qt_wait import wait_until

    out = Path(argv[0] if argv else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["HISHO_HOME"] = tempfile.mkdtemp(prefix="hisho-shots-")
    from hisho.gui.shell.app import application, open_window

    app = application()
    window = open_window(None)
    window.resize(1280, 720)
    window.show()
    wait_until(app, lambda: window.controller.model_ready, timeout=600)
    shots(app, window, out)
    window.close()
    sys.stdout.write(f"wrote {len(list(out.glob(pattern)))} screenshots to {out}\n")
    return 0
