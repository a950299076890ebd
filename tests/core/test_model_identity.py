"""The model identity covers every byte and is computed once per file version (issue 16, point 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hisho.core.models import identity as model_identity


def make(path: Path, size: int = 3 * model_identity.BLOCK + 123) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def test_a_byte_in_the_middle_changes_the_identity(tmp_path: Path) -> None:
    f = make(tmp_path / "m.gguf")
    before = model_identity.identity(f)
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.seek(st.st_size // 2)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x80]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the same size, inode and mtime as before
    assert model_identity.identity(f) != before


def test_cached_while_the_file_is_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = make(tmp_path / "m.gguf")
    first = model_identity.identity(f)
    calls: list[object] = []
    real = model_identity.hash_file
    monkeypatch.setattr(model_identity, "hash_file", lambda p: calls.append(p) or real(p))
    assert model_identity.identity(f) == first and calls == []
    os.utime(f)  # a new mtime (a re-download of the same bytes): hashed again, same answer
    assert model_identity.identity(f) == first and len(calls) == 1


def test_a_damaged_cache_is_ignored(tmp_path: Path) -> None:
    f = make(tmp_path / "m.gguf", 1000)
    cache = tmp_path / "ids.json"
    cache.write_text("{not json")
    assert model_identity.identity(f, cache) == model_identity.identity(f, tmp_path / "other.json")
