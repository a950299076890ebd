"""The KV chunk file format: chained keys, header checks, checksums, atomic writes (no engine needed)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from hisho.core.kv import format as kvf

FP = kvf.fingerprint({"model": "a", "type_k": "f16"})


def write_chunk(kv_dir: Path, tokens: list[int], payload: bytes, fp: str = FP) -> tuple[Path, kvf.ChunkPlan]:
    plan = kvf.plan_chunks(fp, tokens, 0)[0]
    path = kvf.chunk_path(kv_dir, fp, plan.key)
    kvf.write_atomic(path, kvf.encode_header(fp, plan, tokens, payload), payload)
    return path, plan


def read(path: Path) -> tuple[kvf.ChunkHeader, bytes]:
    with open(path, "rb") as fh:
        header = kvf.read_header(fh, path.stat().st_size)
        return header, fh.read()


def test_keys_chain_over_every_earlier_token_and_the_fingerprint() -> None:
    tokens = list(range(100))
    a = kvf.plan_chunks(FP, tokens, 32)
    assert [(p.start, p.end) for p in a] == [(0, 32), (32, 64), (64, 96), (96, 100)]
    assert a[0].parent == kvf.root_key(FP) and all(a[i].parent == a[i - 1].key for i in range(1, 4))
    longer = kvf.plan_chunks(FP, tokens + [7, 8, 9], 32)
    assert [p.key for p in longer[:3]] == [p.key for p in a[:3]]  # shared prefix, same chunks
    changed = kvf.plan_chunks(FP, [999] + tokens[1:], 32)
    assert not {p.key for p in changed} & {p.key for p in a}  # one early token changes every later key
    other = kvf.plan_chunks(kvf.fingerprint({"model": "b", "type_k": "f16"}), tokens, 32)
    assert not {p.key for p in other} & {p.key for p in a}
    assert kvf.fingerprint({"type_k": "f16"}) != kvf.fingerprint({"type_k": "q8_0"})


def test_round_trip(tmp_path: Path) -> None:
    payload = os.urandom(10_000)
    path, plan = write_chunk(tmp_path, [1, 2, 3], payload)
    header, body = read(path)
    assert header.key == plan.key and header.tokens == (1, 2, 3) and header.fingerprint == FP
    assert header.payload_offset % kvf.ALIGN == 0
    assert body == payload and kvf.payload_ok(header, body)
    assert not [p for p in path.parent.iterdir() if kvf.is_temp(p)]


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path, _ = write_chunk(tmp_path, [1, 2, 3], os.urandom(5000))
    data = path.read_bytes()
    for cut in (3, kvf.PREFIX.size + 5, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(kvf.KVFormatError):
            read(path)


def test_flipped_payload_byte_fails_the_checksum(tmp_path: Path) -> None:
    path, _ = write_chunk(tmp_path, [5, 6], os.urandom(5000))
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))
    header, body = read(path)
    assert not kvf.payload_ok(header, body)


def test_flipped_header_byte_is_refused(tmp_path: Path) -> None:
    path, _ = write_chunk(tmp_path, [5, 6], os.urandom(500))
    data = bytearray(path.read_bytes())
    data[kvf.PREFIX.size + 3] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(kvf.KVFormatError, match="header"):
        read(path)


def test_not_a_kv_file(tmp_path: Path) -> None:
    path = tmp_path / "x.hkv"
    path.write_bytes(b"GGUF" + b"\0" * 200)
    with pytest.raises(kvf.KVFormatError, match="not a Hisho KV file"):
        read(path)


def test_disk_full_during_write_leaves_nothing_behind(tmp_path: Path) -> None:
    def full_disk(fh: object, data: memoryview) -> None:
        fh.write(data[:100])  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    plan = kvf.plan_chunks(FP, [1], 0)[0]
    path = kvf.chunk_path(tmp_path, FP, plan.key)
    payload = os.urandom(1000)
    with pytest.raises(OSError) as info:
        kvf.write_atomic(path, kvf.encode_header(FP, plan, [1], payload), payload, writer=full_disk)
    assert info.value.errno == errno.ENOSPC
    assert list(path.parent.iterdir()) == []  # neither the final file nor the temp file


def test_interrupted_write_never_shows_under_the_final_name(tmp_path: Path) -> None:
    def killed(fh: object, data: memoryview) -> None:
        fh.write(data[:10])  # type: ignore[attr-defined]
        raise KeyboardInterrupt  # stands in for the process dying mid-write

    plan = kvf.plan_chunks(FP, [1], 0)[0]
    path = kvf.chunk_path(tmp_path, FP, plan.key)
    with pytest.raises(KeyboardInterrupt):
        kvf.write_atomic(path, kvf.encode_header(FP, plan, [1], b"abc" * 100), b"abc" * 100, writer=killed)
    assert not path.exists()


def test_tokens_that_do_not_match_the_key_are_refused(tmp_path: Path) -> None:
    plan = kvf.plan_chunks(FP, [1, 2, 3], 0)[0]
    path = kvf.chunk_path(tmp_path, FP, plan.key)
    payload = b"x" * 64
    kvf.write_atomic(path, kvf.encode_header(FP, plan, [1, 2, 4], payload), payload)
    with pytest.raises(kvf.KVFormatError, match="key"):
        read(path)
