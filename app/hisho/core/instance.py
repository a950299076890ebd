"""One Hisho per data folder (issue 16, point 7).

Two instances on one conversation store put their messages on separate branches, and the second marks the
first's still-streaming reply ``interrupted`` when it opens the store. So the window and ``hisho chat`` take an
exclusive lock on ``<data>/hisho.lock`` for as long as they run; a second one is told which process holds it.
The lock is an OS file lock (flock / msvcrt), so it goes away with its process, even after a kill -9: no stale
lock files to clean up. The file holds "PID ROLE" (``gui`` or ``chat``): a second window launch hands over to a
first *window* (hisho.gui.shell.single brings it to the front) and is refused when the first is a terminal chat.
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

    def __init__(self, pid: str, folder: Path, role: str = "") -> None:
        self.pid, self.folder, self.role = pid, folder, role
        super().__init__(f"Hisho is already running on {folder} (process {pid or '?'}); use that window or "
                         "chat, or close it first")


def acquire(folder: Path | None = None, role: str = "") -> None:
    """Lock the data folder for this process, or raise AlreadyRunning. Idempotent within a process. ``role``
    (``gui``, ``chat``) is written next to the pid for a second launch to read."""
    if _held:
        return
    folder = folder or paths.data_dir()
    path = folder / LOCK_NAME
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open until the process ends
    try:
        _lock(fh)
    except OSError:
        fh.seek(0)
        pid, _, held_as = fh.read().strip().partition(" ")
        fh.close()
        raise AlreadyRunning(pid, folder, held_as) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()} {role}".strip())
    fh.flush()
    _held.append(fh)
    log.info("data folder %s locked by pid %d", folder, os.getpid())


def release() -> None:
    """Give the lock back before the process ends (tests; the OS does it at exit)."""
    while _held:
        _held.pop().close()


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
