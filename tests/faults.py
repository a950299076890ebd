"""Fault injection for tests: a small real file system that fills up, and engine work (a model load, a prompt's
reading) held in flight.

``small_fs`` mounts a tmpfs of a given size (needs root or CAP_SYS_ADMIN; the test is skipped otherwise, and the
same faults are also reached through SQLite's ``max_page_count`` in tests that run everywhere). ``fill`` takes
all but ``leave`` bytes of it, ``drain`` gives them back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient

FILLER = ".filler"


@contextmanager
def small_fs(path: Path, size_bytes: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        pytest.skip("a full-disk test needs a tmpfs: run as root (CI runs it in a container)")
    done = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size_bytes},mode=700", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(fs: Path, leave: int = 0) -> None:
    """Write a filler file until the disk is full, then give ``leave`` bytes back."""
    filler = fs / FILLER
    block = b"\0" * (1 << 16)
    with open(filler, "ab", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError:
            pass
        # the last write may have been partial: pad nothing, just trim what we promised to leave
        size = fh.seek(0, os.SEEK_END)
        fh.truncate(max(0, size - leave))


def drain(fs: Path) -> None:
    (fs / FILLER).unlink(missing_ok=True)


class EngineFreeze:
    """Holds an engine's request in flight, whatever the machine's speed: a watcher thread stops the engine
    process (SIGSTOP) as soon as a request of ``op`` reports progress past its start and short of its end, so a
    test's Stop (or its look at a "Reading…"/"Loading…" text) lands while the work is really in flight (on a fast
    machine a 1B file or a few hundred prompt tokens otherwise finish within the window's next tick). ``thaw``
    (also on leaving the ``with``) lets the process go on, where it reads the cancel first. ``op``: "load",
    "prefill" (type-ahead), "generate" (a reply reading its prompt), or None: whatever reports progress first.
    """

    def __init__(self, engine: EngineClient, op: str | None = "load", timeout_s: float = 120.0) -> None:
        self._engine = engine
        self._op = op
        self._timeout_s = timeout_s
        self._pid: int | None = None
        self.frozen = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{op or 'engine'}-freeze", daemon=True)

    def __enter__(self) -> EngineFreeze:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thaw()

    def _watch(self) -> None:
        end = time.monotonic() + self._timeout_s
        while time.monotonic() < end:
            p = self._engine.progress()
            pid = self._engine.pid
            if p is not None and self._op in (None, p.op) and 0 < p.done < p.total and pid is not None:
                os.kill(pid, signal.SIGSTOP)
                self._pid = pid
                self.frozen.set()
                return
            time.sleep(0.001)

    def thaw(self) -> None:
        self._thread.join(self._timeout_s)
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):  # the held process was killed meanwhile (a close)
                os.kill(self._pid, signal.SIGCONT)
            self._pid = None


class LoadFreeze(EngineFreeze):
    """An ``EngineFreeze`` of a model load: held mid-file."""

    def __init__(self, engine: EngineClient, timeout_s: float = 120.0) -> None:
        super().__init__(engine, "load", timeout_s)
