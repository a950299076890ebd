"""Where a measurement of one model file on this machine is kept: one file per key under the cache folder.

A measurement (the prompt-offload split, the flash-attention choice) is valid for the model file as it is on
disk (its resolved path, size and modification time), the llama.cpp build and whatever else the caller names
(devices, context bucket, threads): the key is all of them, hashed into the file's name, so a changed file or
build simply finds nothing and measures again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hisho.core import paths


def model_file_key(model_path: str) -> str:
    """The model file as it is now: its resolved path, size and modification time (the path alone if unreadable)."""
    p = Path(model_path)
    try:
        stat = p.stat()
    except OSError:
        return str(p)
    return f"{p.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def kept_file(folder: str, model_path: str, *parts: object) -> Path:
    """``cache_dir()/folder/<hash of the model file's key and parts>.json``."""
    key = "|".join([model_file_key(model_path), *(str(part) for part in parts)])
    return paths.cache_dir() / folder / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.json"
