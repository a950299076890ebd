"""The identity of a model file: a hash of every byte of it, computed once per file version.

Why every byte: a KV state is only valid for the exact weights that computed it. A hash of the first and last
MiB missed a changed byte in ``blk.15.ffn_down`` and restored 1,793 tokens of stale KV into the new model.
xxh3-128 reads at memory speed, so the whole file costs about what reading it from disk costs;
the result is cached under the file's path and ``(size, mtime, ctime, inode)``, so a later load pays one
``stat``. ctime is in the key because a program can put an old mtime back after writing (``cp -p``, ``rsync
-t``, ``touch -d``) but cannot set ctime. No llama_cpp here: the engine calls it on its own thread.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

import xxhash

from hisho.core import paths
from hisho.core.atomic import write_text_atomic

log = logging.getLogger("hisho.kv")

BLOCK = 8 << 20
WINDOW = 16 << 20  # a multiple of mmap.ALLOCATIONGRANULARITY on every platform (64 KiB on Windows)
CACHE_NAME = "model-identity.json"
_lock = threading.Lock()


def file_key(path: str | os.PathLike[str]) -> dict[str, int]:
    """What must not change for a cached identity to stay valid."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


def hash_file(path: str | os.PathLike[str]) -> str:
    """xxh3-128 of every byte of the file, hashed from read-only mappings of ``WINDOW`` bytes, one at a time: no
    copy (pages already in the page cache from llama.cpp's own load are not read again; measured on a 1 GB file:
    0.5-0.6 s mapped vs 2.6-3.2 s through readinto on the loaded 2-core box). One window at a time because every
    page of a mapping that is read counts in the process's resident memory until it is unmapped: one mapping of
    the whole file made the engine's peak grow by the model's size (771 MiB on the Gemma-3-1B shape, on top of its
    weights) on the first KV save of each model file."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        for start in range(0, size, WINDOW):
            length = min(WINDOW, size - start)
            with mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_READ, offset=start) as mm:
                view = memoryview(mm)
                try:
                    for off in range(0, length, BLOCK):
                        h.update(view[off:off + BLOCK])
                finally:
                    view.release()
    return h.hexdigest()


def identity(path: str | os.PathLike[str], cache: Path | None = None) -> dict[str, Any]:
    """``{"size", "xxh3_128"}`` of a model file, from the cache when the file's key is unchanged."""
    real = os.path.realpath(path)
    cache = cache or paths.cache_dir() / CACHE_NAME
    key = file_key(real)
    with _lock:
        entries = _read(cache)
        hit = entries.get(real)
        if isinstance(hit, dict) and hit.get("key") == key and isinstance(hit.get("xxh3_128"), str):
            return {"size": key["size"], "xxh3_128": hit["xxh3_128"]}
    start = time.perf_counter()
    digest = hash_file(real)
    seconds = time.perf_counter() - start
    if file_key(real) != key:  # written to while we read: do not cache a hash of a mix of versions
        log.warning("model file %s changed while it was hashed; not caching its identity", real)
        return {"size": key["size"], "xxh3_128": digest}
    log.info("model identity of %s (%d bytes) computed in %.2fs", real, key["size"], seconds)
    with _lock:
        entries = _read(cache)
        entries[real] = {"key": key, "xxh3_128": digest, "seconds": round(seconds, 3)}
        _write(cache, entries)
    return {"size": key["size"], "xxh3_128": digest}


def _read(cache: Path) -> dict[str, Any]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(cache: Path, entries: dict[str, Any]) -> None:
    try:
        write_text_atomic(cache, json.dumps(entries))
    except OSError as exc:  # a cache: losing it costs one more hash, never a wrong answer
        log.warning("could not write %s: %s", cache, exc)
