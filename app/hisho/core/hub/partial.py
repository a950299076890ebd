"""How far a partial download can be trusted (docs/hub.md, "Trusting a partial").

Within one boot of the machine the partial file's length is the truth: whatever a process wrote before it was
killed is in the page cache, so a resume continues at the very end and nothing is fetched twice. After the
machine went down (a crash, a power cut, a reboot), a file's length can run ahead of its data (blocks the
kernel never wrote back read as zeros), so only the length last made durable is trusted: every ``CHECKPOINT``
bytes the partial is fdatasync'ed and that length recorded in a ledger beside it
(``.<name>.<etag>.part.ok``: ``{"boot": …, "durable": …}``); a resume in another boot cuts the partial back to
it. No ledger, no trust: the partial starts again from zero.

The checkpoints run on a thread of their own, so the receiving thread never waits for the disk.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from functools import cache
from pathlib import Path

from hisho.core.atomic import write_text_atomic

log = logging.getLogger("hisho.hub")

CHECKPOINT = 64 * 1024**2  # bytes between durable checkpoints: what a crash can cost at most, plus the tail
LEDGER = ".ok"


@cache
def boot_id() -> str:
    """Names this boot of the machine: Linux's boot_id, elsewhere the boot time."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        import psutil

        return f"boot-{psutil.boot_time():.0f}"


def ledger_path(partial: Path) -> Path:
    return partial.with_name(partial.name + LEDGER)


def read_ledger(partial: Path) -> tuple[str, int] | None:
    """(boot, durable bytes) as recorded, or None when there is no readable ledger."""
    try:
        data = json.loads(ledger_path(partial).read_text(encoding="utf-8"))
        return str(data["boot"]), int(data["durable"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(partial: Path, durable: int, *, sync: bool = True) -> None:
    """Write the ledger. ``sync``: make the ledger itself durable (a checkpoint); without it (the ledger a
    download starts with) a crash may lose it, which only means trusting less."""
    text = json.dumps({"boot": boot_id(), "durable": durable})
    if sync:
        write_text_atomic(ledger_path(partial), text)
        return
    tmp = ledger_path(partial).with_name(ledger_path(partial).name + f".tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, ledger_path(partial))


def trusted_length(partial: Path) -> int:
    """Bytes of ``partial`` a resume may keep (module docstring)."""
    try:
        size = partial.stat().st_size
    except FileNotFoundError:
        return 0
    ledger = read_ledger(partial)
    if ledger is None:
        return 0
    boot, durable = ledger
    return size if boot == boot_id() else min(size, max(0, durable))


def trust(partial: Path) -> int:
    """Cut ``partial`` back to what may be trusted, start its ledger in this boot; returns its length."""
    keep = trusted_length(partial)
    if partial.exists() and partial.stat().st_size > keep:
        log.info("%s: keeping %d of %d bytes (the rest was not known to be on disk before the machine "
                 "restarted)", partial.name, keep, partial.stat().st_size)
        os.truncate(partial, keep)
    ledger = read_ledger(partial)
    if ledger is None or ledger[0] != boot_id():
        partial.parent.mkdir(parents=True, exist_ok=True)
        record(partial, keep, sync=False)
    return keep


def remove(partial: Path) -> None:
    partial.unlink(missing_ok=True)
    ledger_path(partial).unlink(missing_ok=True)


class Checkpoints:
    """Makes the partial durable every ``CHECKPOINT`` bytes and records the length, on its own thread.
    ``grew(pos)`` is called by the receiving thread after each write (a comparison, nothing more). The thread
    syncs through a descriptor of its own, so ``close`` never waits for a sync in flight (the caller's final
    fsync waits for the same writeback anyway): after ``close`` it records nothing more."""

    def __init__(self, fd: int, partial: Path, pos: int, every: int | None = None) -> None:
        self.fd, self.partial = os.dup(fd), partial
        self.every = every or CHECKPOINT
        self.next = pos + self.every
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.done = False
        self.t = threading.Thread(target=self._run, name="hisho-checkpoint", daemon=True)
        self.t.start()

    def grew(self, pos: int) -> None:
        if pos >= self.next:
            self.next = pos + self.every
            self.wake.set()

    def _run(self) -> None:
        try:
            while True:
                self.wake.wait()
                self.wake.clear()
                if self.done:
                    return
                try:
                    length = os.fstat(self.fd).st_size  # every byte below this was written before the sync
                    os.fdatasync(self.fd) if hasattr(os, "fdatasync") else os.fsync(self.fd)
                    with self.lock:
                        if self.done:
                            return
                        record(self.partial, length)
                except OSError as exc:  # a checkpoint is insurance: a failed one leaves the previous one
                    log.warning("could not record the progress of %s: %s", self.partial.name, exc)
        finally:
            os.close(self.fd)

    def close(self) -> None:
        with self.lock:  # waits only for a ledger write in progress, never for a sync
            self.done = True
        self.wake.set()
