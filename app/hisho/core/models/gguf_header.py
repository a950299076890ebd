"""A fast GGUF header walk for the planner: the same answers as ``gguf.GGUFReader`` for what gguf_facts asks
(fields' contents, tensor names / types / sizes / offsets), in milliseconds instead of seconds.

``gguf.GGUFReader`` builds a numpy view per element of every array, which takes seconds for a 50k-300k token
vocabulary; the planner needs none of those strings. Here long arrays are skipped by walking their lengths,
numeric arrays are kept (per-layer head counts, sliding-window patterns). Sizes and type codes come from the
``gguf`` package. Any inconsistency raises ``HeaderError``; callers then fall back to ``GGUFReader``, whose
error messages they already turn into user messages.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
KEEP_ARRAY = 4096        # numeric arrays up to this length are decoded (per-layer values); longer are skipped
MAX_COUNT = 1 << 31


class HeaderError(ValueError):
    """The bytes are not a GGUF header this walker understands (or are cut short)."""


@dataclass
class Field:
    value: Any
    n: int = 1

    @property
    def data(self) -> range:
        return range(self.n)  # only its length is used (the number of elements of an array)

    def contents(self) -> Any:
        return self.value


@dataclass
class Tensor:
    name: str
    tensor_type: int
    n_bytes: int
    data_offset: int
    shape: tuple[int, ...] = ()  # ggml order: ne[0] (row length), ne[1], ...


@dataclass
class Header:
    fields: dict[str, Field] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)
    data_offset: int = 0


class _Cursor:
    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise HeaderError("header is cut short")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if n > len(self.buf) - self.pos:
            raise HeaderError("string runs past the end")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", "replace")

    def skip_strings(self, count: int) -> None:
        for _ in range(count):
            n = self.take("<Q")
            self.pos += n
        if self.pos > len(self.buf):
            raise HeaderError("array runs past the end")

    def value(self, vtype: int) -> tuple[Any, int]:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype]), 1
        if vtype == _STRING:
            return self.string(), 1
        if vtype != _ARRAY:
            raise HeaderError(f"unknown value type {vtype}")
        etype, count = self.take("<I"), self.take("<Q")
        if count > MAX_COUNT:
            raise HeaderError("absurd array length")
        if etype == _STRING:
            if count <= 64:
                return [self.string() for _ in range(count)], count
            self.skip_strings(count)
            return None, count
        if etype not in _SCALARS:
            raise HeaderError(f"unknown array element type {etype}")
        size = struct.calcsize(_SCALARS[etype])
        if count <= KEEP_ARRAY:
            if self.pos + size * count > len(self.buf):
                raise HeaderError("array runs past the end")
            values = list(struct.unpack_from(f"<{count}{_SCALARS[etype][1]}", self.buf, self.pos))
            self.pos += size * count
            return values, count
        self.pos += size * count
        return None, count


def parse(buf: Any) -> Header:
    """Walk a GGUF v2/v3 header held in ``buf`` (bytes or an mmap)."""
    c = _Cursor(buf)
    if bytes(buf[:4]) != b"GGUF":
        raise HeaderError("wrong magic")
    c.pos = 4
    version = c.take("<I")
    if version not in (2, 3):
        raise HeaderError(f"unsupported GGUF version {version}")
    n_tensors, n_kv = c.take("<Q"), c.take("<Q")
    if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
        raise HeaderError("absurd counts")
    h = Header()
    for _ in range(n_kv):
        key = c.string()
        value, n = c.value(c.take("<I"))
        h.fields[key] = Field(value, n)
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.take("<I")
        if n_dims > 8:
            raise HeaderError("tensor with more than 8 dimensions")
        dims = [c.take("<Q") for _ in range(n_dims)]
        ttype, offset = c.take("<I"), c.take("<Q")
        infos.append((name, dims, ttype, offset))
    align_field = h.fields.get("general.alignment")
    align = int(align_field.value) if align_field is not None else 32
    if align <= 0 or align & (align - 1):
        raise HeaderError("invalid alignment")
    h.data_offset = -(-c.pos // align) * align
    for name, dims, ttype, offset in infos:
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise HeaderError(f"unknown tensor type {ttype}") from None
        n = 1
        for d in dims:
            n *= d
        h.tensors.append(Tensor(name, ttype, n // block * size, h.data_offset + offset, tuple(dims)))
    return h


def read(path: Path) -> Header:
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return parse(mm)
