"""Cheap validation of a GGUF file before the engine touches it.

llama.cpp aborts the process on some malformed files; the engine runs in a child process for that reason, but a
clear message before we even start it is better. This reads only the header and the tensor table.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

from hisho.core.errors import ModelFileError

log = logging.getLogger("hisho.engine")

GGUF_MAGIC = b"GGUF"


def validate_gguf(path: str | Path) -> Path:
    """Return the resolved path if it looks like a loadable GGUF file, else raise ModelFileError."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {p}")
    size = p.stat().st_size
    if size == 0:
        raise ModelFileError(f"model file is empty (0 bytes): {p}")
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    if len(head) < 8 or head[:4] != GGUF_MAGIC:
        raise ModelFileError(f"not a GGUF model file (wrong magic bytes): {p}")
    version = struct.unpack("<I", head[4:8])[0]
    if version not in (2, 3):
        raise ModelFileError(f"unsupported GGUF version {version}: {p}")
    tensors = _tensor_table(p)
    end = 0
    for tensor in tensors:
        end = max(end, int(tensor.data_offset) + int(tensor.n_bytes))
    if end > size:
        raise ModelFileError(
            f"GGUF file is truncated: tensor data needs {end} bytes but the file has {size}: {p}"
        )
    if not tensors:
        raise ModelFileError(f"GGUF file holds no tensors (metadata only?): {p}")
    return p.resolve()


def _tensor_table(p: Path) -> list[Any]:
    """The tensor table, by the fast header walk (milliseconds); gguf's own reader (seconds on a large
    vocabulary) only where the walk does not understand the header, for its error message."""
    from hisho.core import gguf_header

    try:
        return list(gguf_header.read(p).tensors)
    except (gguf_header.HeaderError, ValueError, OSError, struct.error) as exc:
        log.info("fast GGUF walk failed on %s (%s); trying gguf.GGUFReader", p, exc)
    try:
        from gguf import GGUFReader

        return list(GGUFReader(str(p)).tensors)
    except Exception as exc:  # the reader raises many types on damaged headers
        raise ModelFileError(f"GGUF header is damaged or truncated ({type(exc).__name__}): {p}") from None
