"""The model identity covers every byte and is computed once per file version."""

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


def test_the_hash_is_of_every_byte_across_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import xxhash

    monkeypatch.setattr(model_identity, "WINDOW", 1 << 20, raising=False)
    f = make(tmp_path / "m.gguf", (7 << 19) + 77)  # three and a half windows and a bit
    assert model_identity.hash_file(f) == xxhash.xxh3_128_hexdigest(f.read_bytes())


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the peak")
def test_hashing_holds_one_window_of_the_file_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every page of a mapping that is read stays resident until unmapped: one mapping of the whole file made the
    # engine's peak grow by the model's size on its first KV save.
    monkeypatch.setattr(model_identity, "WINDOW", 4 << 20, raising=False)
    f = make(tmp_path / "m.gguf", 64 << 20)
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak_rss()
    model_identity.hash_file(f)
    assert _peak_rss() - before < 24 << 20
