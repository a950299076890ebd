"""One Hisho per data folder (issue 16, point 7).

Two instances on one conversation store put their messages on separate branches, and the second marks the
first's still-streaming reply ``interrupted`` when it opens the store. So the window and ``hisho chat`` take an
exclusive lock on ``<data>/hisho.lock`` for as long as they run; a second one is told which process holds it.
The lock is an OS file lock (flock / msvcrt), so it goes away with its process, even after a kill -9: no stale
lock files to clean up.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO

from hisho.core import paths
from hisho.core.errors import UserError

log = logging.getLogger("hisho.store")

LOCK_NAME = "hisho.lock"
_held: list[IO[str]] = []  # kept open for the life of the process


class AlreadyRunning(UserError):
    """Another Hisho uses the same data folder."""

    def __init__(self, pid: str, folder: Path) -> None:
        self.pid = pid
        super().__init__(f"Hisho is already running on {folder} (process {pid or '?'}); use that window or "
                         "chat, or close it first")


def acquire(folder: Path | None = None) -> None:
    """Lock the data folder for this process, or raise AlreadyRunning. Idempotent within a process."""
    if _held:
        return
    folder = folder or paths.data_dir()
    path = folder / LOCK_NAME
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open until the process ends
    try:
        _lock(fh)
    except OSError:
        fh.seek(0)
        pid = fh.read().strip()
        fh.close()
        raise AlreadyRunning(pid, folder) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    _held.append(fh)
    log.info("data folder %s locked by pid %d", folder, os.getpid())


def held() -> bool:
    """Whether this process holds the data folder's lock (no other Hisho can be writing there)."""
    return bool(_held)


def _lock(fh: IO[str]) -> None:
    if sys.platform == "win32":  # pragma: no cover - Windows
        import msvcrt

        msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
