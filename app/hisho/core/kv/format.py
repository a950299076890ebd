"""The KV chunk file: header, fingerprint, chained keys, checksum and the atomic write. No llama_cpp here.

A chunk file holds the llama.cpp per-sequence state of one token range ``[start, start + n_tokens)`` of a
prompt, exactly as ``llama_state_seq_get_data`` produced it. Layout (see docs/kv-format.md)::

    PREFIX   8s magic | u32 format version | u32 header length | u64 xxh3-64 of the header bytes
    HEADER   UTF-8 JSON: fingerprint, key, parent, start, n_tokens, tokens, payload_bytes, payload_xxh3
    PADDING  zeros up to a 64-byte boundary
    PAYLOAD  payload_bytes of llama.cpp state

Rules of use:
- ``chunk_key(parent, tokens)`` chains: the key of a chunk depends on every token before it and on the
  fingerprint (the root parent is ``root_key(fingerprint)``). Equal keys mean equal prefixes, so shared prefixes
  are stored once and a file can be named by its key.
- ``read_header`` raises ``KVFormatError`` with a one-line reason for anything that is not a whole, valid file;
  the payload checksum is checked by the reader of the payload (``payload_ok``) before llama.cpp sees it.
- ``write_atomic`` (``hisho.core.atomic``) never leaves a half-written file under the final name: temp file,
  fsync, rename, fsync dir.
"""

from __future__ import annotations

import hashlib
import json
import struct
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import xxhash

# The KV format's writers live in hisho.core.atomic (one home for atomic writes); re-exported for its users.
from hisho.core.atomic import TMP_MARK as TMP_MARK
from hisho.core.atomic import Writer as Writer
from hisho.core.atomic import is_temp as is_temp
from hisho.core.atomic import write_atomic as write_atomic

MAGIC = b"HISHOKV\x00"
FORMAT_VERSION = 1
PREFIX = struct.Struct("<8sIIQ")
ALIGN = 64
SUFFIX = ".hkv"
NO_STATE = -1  # ChunkHeader.state_end of a recurrent model's chunk whose file leaves the state out
MAX_HEADER = 8 << 20  # a header holds at most a few thousand token ids; more is a damaged file


class KVFormatError(Exception):
    """A chunk file is not usable (truncated, damaged, from another model or KV type). Message: the reason."""


def fingerprint(facts: dict[str, Any]) -> str:
    """Hash of everything that decides whether a state can be loaded into a context (canonical JSON)."""
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def root_key(fp: str) -> str:
    return hashlib.blake2b(b"hisho-kv-root\x00" + fp.encode("ascii"), digest_size=16).hexdigest()


def tokens_bytes(tokens: Iterable[int]) -> bytes:
    arr = array("i", tokens)
    if arr.itemsize != 4:  # pragma: no cover - every platform we ship has a 4-byte int
        raise RuntimeError("array('i') is not 32-bit here")
    return arr.tobytes()


def chunk_key(parent: str, tokens: Sequence[int]) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(parent.encode("ascii"))
    h.update(tokens_bytes(tokens))
    return h.hexdigest()


def chunk_bounds(n_tokens: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """Token ranges for ``n_tokens``: full chunks at multiples of ``chunk_tokens``, then the tail.
    ``chunk_tokens`` <= 0 means one chunk for everything."""
    if n_tokens <= 0:
        return []
    if chunk_tokens <= 0:
        return [(0, n_tokens)]
    return [(s, min(s + chunk_tokens, n_tokens)) for s in range(0, n_tokens, chunk_tokens)]


@dataclass(frozen=True)
class ChunkPlan:
    """One chunk to save or restore: its range, key, parent key and file name."""

    start: int
    end: int
    key: str
    parent: str

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


def plan_chunks(fp: str, tokens: Sequence[int], chunk_tokens: int) -> list[ChunkPlan]:
    parent = root_key(fp)
    plans = []
    for start, end in chunk_bounds(len(tokens), chunk_tokens):
        key = chunk_key(parent, tokens[start:end])
        plans.append(ChunkPlan(start, end, key, parent))
        parent = key
    return plans


def chunk_path(kv_dir: Path, fp: str, key: str) -> Path:
    """Where a chunk lives: one folder per fingerprint, the file named by its key."""
    return kv_dir / fp[:16] / f"{key}{SUFFIX}"


def payload_checksum(data: Any) -> str:
    return xxhash.xxh3_128_hexdigest(data)


@dataclass(frozen=True)
class ChunkHeader:
    fingerprint: str
    key: str
    parent: str
    start: int
    tokens: tuple[int, ...]
    payload_bytes: int
    payload_xxh3: str
    payload_offset: int
    # What a restore that ends at this chunk can continue from exactly (docs/kv-format.md "Memory types"):
    # the lowest position of the sliding-window cells the payload holds (None: no window layers), the
    # position after the last token a recurrent state in it has seen (None: no recurrent layers; NO_STATE: a
    # recurrent model's chunk saved without the state, which ends no restore point), the window.
    swa_lo: int | None = None
    state_end: int | None = None
    n_swa: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    def resume(self) -> dict[str, int | None]:
        return {"swa_lo": self.swa_lo, "state_end": self.state_end, "n_swa": self.n_swa}


def encode_header(fp: str, plan: ChunkPlan, tokens: Sequence[int], payload: Any,
                  resume: dict[str, Any] | None = None) -> bytes:
    """The bytes before the payload (prefix, JSON header, padding). ``payload`` is any buffer; ``resume``
    the memory facts of ``ChunkHeader`` (swa_lo, state_end, n_swa) for models that are not dense."""
    meta = {
        "fingerprint": fp, "key": plan.key, "parent": plan.parent, "start": plan.start,
        "n_tokens": plan.n_tokens, "tokens": list(tokens), "payload_bytes": len(memoryview(payload)),
        "payload_xxh3": payload_checksum(payload),
    }
    if resume:
        meta.update(resume)
    body = json.dumps(meta, separators=(",", ":")).encode("utf-8")
    head = PREFIX.pack(MAGIC, FORMAT_VERSION, len(body), xxhash.xxh3_64_intdigest(body)) + body
    return head + b"\0" * (-len(head) % ALIGN)


def read_header(fh: BinaryIO, file_size: int) -> ChunkHeader:
    """Parse and check a chunk file's header; the file position ends at the payload."""
    raw = fh.read(PREFIX.size)
    if len(raw) < PREFIX.size:
        raise KVFormatError("truncated before the header")
    magic, version, length, digest = PREFIX.unpack(raw)
    if magic != MAGIC:
        raise KVFormatError("not a Hisho KV file")
    if version != FORMAT_VERSION:
        raise KVFormatError(f"KV file format {version}, this Hisho reads {FORMAT_VERSION}")
    if length > MAX_HEADER:
        raise KVFormatError("header length is implausible")
    body = fh.read(length)
    if len(body) != length or xxhash.xxh3_64_intdigest(body) != digest:
        raise KVFormatError("header damaged or truncated")
    try:
        meta = json.loads(body)
        offset = PREFIX.size + length + (-(PREFIX.size + length) % ALIGN)
        header = ChunkHeader(
            fingerprint=str(meta["fingerprint"]), key=str(meta["key"]), parent=str(meta["parent"]),
            start=int(meta["start"]), tokens=tuple(int(t) for t in meta["tokens"]),
            payload_bytes=int(meta["payload_bytes"]), payload_xxh3=str(meta["payload_xxh3"]),
            payload_offset=offset,
            swa_lo=None if meta.get("swa_lo") is None else int(meta["swa_lo"]),
            state_end=None if meta.get("state_end") is None else int(meta["state_end"]),
            n_swa=int(meta.get("n_swa") or 0),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise KVFormatError(f"header fields invalid ({exc})") from None
    if header.n_tokens != int(meta.get("n_tokens", -1)) or chunk_key(header.parent, header.tokens) != header.key:
        raise KVFormatError("header tokens do not match its key")
    if file_size != offset + header.payload_bytes:
        raise KVFormatError(f"file is {file_size} bytes, header says {offset + header.payload_bytes}")
    fh.seek(offset)
    return header


def payload_ok(header: ChunkHeader, payload: Any) -> bool:
    return payload_checksum(payload) == header.payload_xxh3
