"""Atomic file writes: the one way Hisho replaces a file (settings, model registry, calibration, KV chunks).

``write_atomic`` never leaves a half-written file under the final name: it writes a temp file next to it,
fsyncs it, renames it over the target and fsyncs the directory (the rename is durable only once the directory
entry is). On any error the temp file is removed and the error re-raised (an ``OSError`` such as ENOSPC for a
full disk). Temp names contain ``TMP_MARK``, so a crash's leftovers can be recognized and removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

TMP_MARK = ".tmp-"

Writer = Callable[[BinaryIO, memoryview], None]


def _write_all(fh: BinaryIO, data: memoryview) -> None:
    step = 16 << 20
    for i in range(0, len(data), step):
        fh.write(data[i:i + step])


def write_atomic(path: Path, header: bytes, payload: Any = b"", *, writer: Writer = _write_all,
                 private: bool = False) -> int:
    """Write ``header`` + ``payload`` (anything with the buffer protocol) to ``path`` atomically; return the
    bytes written. ``private``: readable by this user only (0600) from the first byte on. ``writer`` is a seam
    for tests that simulate a failing disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    data = memoryview(payload).cast("B")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        if private:
            os.chmod(tmp, 0o600)  # a leftover temp file of the same name keeps its old mode through O_TRUNC
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            writer(fh, data)
            fh.flush()
            os.fsync(fh.fileno())
        replace_durably(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return len(header) + len(data)


def replace_durably(src: Path, dest: Path) -> None:
    """Rename ``src`` (written and fsynced by the caller) over ``dest``, then fsync the folder: the rename is
    durable only once the directory entry is (a downloaded model, a temp file of ``write_atomic``)."""
    os.replace(src, dest)
    fsync_dir(dest.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """``write_atomic`` for a UTF-8 text file (JSON settings, registries, caches)."""
    write_atomic(path, text.encode("utf-8"))


def write_private_text(path: Path, text: str) -> None:
    """``write_text_atomic`` for a secret (API keys, tokens): the file is never readable by others."""
    write_atomic(path, text.encode("utf-8"), private=True)


def fsync_dir(folder: Path) -> None:
    # Windows cannot open a directory for this.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temp(path: Path) -> bool:
    """A temp file ``write_atomic`` left behind (the process died between write and rename)."""
    return TMP_MARK in path.name
