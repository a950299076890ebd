"""The KV chunk files' writer thread and the byte buffers saves and restores go through (hisho.engine.kv.kvstate).

Rules of use:
- ``ChunkWriter`` is the one thread besides the engine's that handles KV bytes: it gets them already copied
  out of llama.cpp (into an ``Arena``), so writing to disk never touches the context. It writes each chunk
  atomically (``hisho.core.kv.format.write_atomic``) and reports every file of a save at once.
- ``Arena``: a buffer allocated once and reused; first-touch page faults on a fresh buffer cost more than
  reading the file (docs/kv-format.md, "Reading"), so every page is touched when it grows.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hisho.core.kv import format as kvf

log = logging.getLogger("hisho.kv")

_ROUND = 4 << 20
WARM_ARENA_MAX = 512 << 20   # arenas up to this size are kept for the next save (ChunkWriter.give_arena)


class Arena:
    """A byte buffer allocated once, grown in 4 MiB steps, every page touched at allocation."""

    def __init__(self) -> None:
        self.buf: ctypes.Array[ctypes.c_uint8] = (ctypes.c_uint8 * 1)()
        self.capacity = 0

    def ensure(self, n: int) -> None:
        if n <= self.capacity:
            return
        cap = -(-n // _ROUND) * _ROUND
        buf = (ctypes.c_uint8 * cap)()
        ctypes.memset(buf, 1, cap)  # touch every page now, not on the restore path
        self.buf, self.capacity = buf, cap

    def ptr(self, offset: int = 0) -> Any:
        return ctypes.cast(ctypes.byref(self.buf, offset), ctypes.POINTER(ctypes.c_uint8))

    def view(self, offset: int, n: int) -> memoryview:
        return memoryview(self.buf).cast("B")[offset:offset + n]


@dataclass
class Job:
    arena: Arena
    parts: list[tuple[dict[str, Any], bytes, int, int]]  # (record, header, offset, size)
    done: Callable[[list[dict[str, Any]]], None]
    test_delay_s: float = 0.0
    test_fail_after: int = -1
    records: list[dict[str, Any]] = field(default_factory=list)


class ChunkWriter:
    """One background thread writing chunk files atomically; hands arenas back for reuse when done."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._free: list[Arena] = []
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._thread = threading.Thread(target=self._loop, name="hisho-kv-writer", daemon=True)
        self._thread.start()

    def take_arena(self, n: int) -> Arena:
        with self._lock:
            arena = max(self._free, key=lambda a: a.capacity) if self._free else Arena()
            if arena in self._free:
                self._free.remove(arena)
        arena.ensure(n)
        return arena

    def give_arena(self, arena: Arena) -> None:
        # Keep two arenas warm, and only turn-sized ones: the first save of a long conversation (16K tokens of
        # a 3B model's f16 KV is ~1.9 GB) needs an arena as large as its KV, which kept would stay resident
        # beside the cache for as long as the engine runs; later turns save a few chunks each.
        with self._lock:
            if len(self._free) < 2 and arena.capacity <= WARM_ARENA_MAX:
                self._free.append(arena)

    def submit(self, job: Job) -> None:
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._jobs.put(job)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            records: list[dict[str, Any]] = []
            for record, header, offset, size in job.parts:
                if records and "error" in records[-1]:
                    # A chain is only usable up to its first hole (KVIndex.record_save): after a failed chunk
                    # (a full disk, mostly) the later ones would be written only to be deleted again.
                    record["error"] = "not written: an earlier chunk of this save failed"
                    records.append(record)
                    continue
                records.append(self._write_one(job, record, header, offset, size))
            self.give_arena(job.arena)
            try:
                job.done(records)
            except Exception:
                log.exception("reporting a finished KV save failed")
            del job  # its arena too, unless kept (give_arena): the loop variable held it until the next save
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()

    def _write_one(self, job: Job, record: dict[str, Any], header: bytes, offset: int,
                   size: int) -> dict[str, Any]:
        path = Path(record["path"])
        writer = _test_writer(job) if job.test_delay_s or job.test_fail_after >= 0 else None
        try:
            if writer is None:
                record["bytes"] = kvf.write_atomic(path, header, job.arena.view(offset, size))
            else:
                record["bytes"] = kvf.write_atomic(path, header, job.arena.view(offset, size), writer=writer)
            record["written"] = True
        except OSError as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
            log.warning("KV chunk %s not saved: %s", path.name, exc)
        return record


def _test_writer(job: Job) -> kvf.Writer:
    """Test hooks: a writer that stalls halfway (for 'killed during a write') or fails like a full disk."""
    def write(fh: Any, data: memoryview) -> None:
        half = len(data) // 2
        if 0 <= job.test_fail_after < len(data):
            fh.write(data[:job.test_fail_after])
            raise OSError(28, "No space left on device (test hook)")
        fh.write(data[:half])
        fh.flush()
        time.sleep(job.test_delay_s)
        fh.write(data[half:])
    return write
