"""Fault injection for tests: a small real file system that fills up.

``small_fs`` mounts a tmpfs of a given size (needs root or CAP_SYS_ADMIN; the test is skipped otherwise, and the
same faults are also reached through SQLite's ``max_page_count`` in tests that run everywhere). ``fill`` takes
all but ``leave`` bytes of it, ``drain`` gives them back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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
