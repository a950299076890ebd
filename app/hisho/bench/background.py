"""``--background N``: busy programs beside a benchmark, the way a browser or an IDE keeps a laptop's cores busy.

Each is a separate Python process spinning in a loop, pinned to no core and at normal priority, so the OS
scheduler shares the cores between them and the benchmark as it would with any other program. They are started
on entry and killed on exit (also when the benchmark fails).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def busy_processes(n: int) -> Iterator[list[int]]:
    """Run ``n`` busy processes for the duration of the ``with`` block; yields their pids."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(max(0, n)):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if procs:
            time.sleep(0.3)  # let them start spinning before anything is timed
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
