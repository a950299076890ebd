"""Put the cells of a sequence's saved KV cache state in position order (a sliding-window model's checkpoint).

Why: a restore places cells in the order the state lists them, and llama.cpp lists them in slot order, which in
a sliding-window cache is ring order (the oldest slots are overwritten first). Attention sums over the slots in
their order, so the same cells in another order round differently. Sorted by position, a checkpoint re-laid
into the live sequence (``PrefixKeeper``) and the same point restored from disk chunks (each file's cells are
already in position order once their source was) end with the same slots, bit for bit.

The format is llama.cpp's per-sequence state as the bundled build writes it (llama-context.cpp
``state_seq_get_data``, llama-kv-cache.cpp ``state_write``/``state_write_meta``/``state_write_data``):

- ``u32`` magic, ``i32`` source sequence;
- per attention cache written (the window cache alone with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``): ``u32``
  streams; per stream ``u32`` cells, then per cell ``i32`` position, ``u32`` sequence count and that many
  ``i32`` sequence ids; then ``u32`` v_trans, ``u32`` layers; per layer ``i32`` K type, ``u64`` row bytes and
  one row per cell; per layer the V rows the same way, or, transposed, ``i32`` type, ``u32`` element bytes,
  ``u32`` rows and, per row, one element per cell.

Anything else (a cell extension of M-RoPE models, a recurrent state after the cells, a format change) does not
parse to the exact length: ``by_position`` then returns None and the caller keeps the order it has.
"""

from __future__ import annotations

import struct

import numpy as np


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def block(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("state shorter than its header says")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out


def by_position(data: bytes) -> bytes | None:
    """``data`` with each stream's cells reordered by position (its K and V rows with them); ``data`` itself
    when already in order; None when it does not parse as the format above, to its exact length."""
    try:
        out, changed = _sorted(data)
    except (ValueError, struct.error):
        return None
    return out if changed else data


def _sorted(data: bytes) -> tuple[bytes, bool]:
    r = _Reader(data)
    parts: list[bytes] = [r.block(8)]  # magic and source sequence
    changed = False
    while r.pos < len(data):
        (n_stream,) = r.take("<I")
        parts.append(struct.pack("<I", n_stream))
        for _ in range(n_stream):
            (count,) = r.take("<I")
            parts.append(struct.pack("<I", count))
            if count == 0:
                continue
            metas: list[bytes] = []
            positions: list[int] = []
            for _c in range(count):
                start = r.pos
                pos, n_seq = r.take("<iI")
                r.block(4 * n_seq)
                positions.append(pos)
                metas.append(data[start:r.pos])
            order = np.argsort(np.asarray(positions, dtype=np.int64), kind="stable")
            moved = bool((order != np.arange(count)).any())
            changed = changed or moved
            parts.extend([metas[i] for i in order] if moved else metas)
            v_trans, n_layer = r.take("<II")
            parts.append(struct.pack("<II", v_trans, n_layer))
            for _layer in range(n_layer):  # K rows
                parts.append(_rows(r, count, order if moved else None))
            for _layer in range(n_layer):  # V rows, or V elements when transposed
                parts.append(_rows(r, count, order if moved else None) if not v_trans
                             else _elements(r, count, order if moved else None))
    if r.pos != len(data):
        raise ValueError("state longer than its cells")
    return b"".join(parts), changed


def _rows(r: _Reader, count: int, order: np.ndarray | None) -> bytes:
    head = r.block(12)
    (_type, row) = struct.unpack("<iQ", head)
    body = r.block(count * row)
    if order is None:
        return head + body
    moved: bytes = np.frombuffer(body, dtype=np.uint8).reshape(count, row)[order].tobytes()
    return head + moved


def _elements(r: _Reader, count: int, order: np.ndarray | None) -> bytes:
    head = r.block(12)
    (_type, size_el, n_rows) = struct.unpack("<iII", head)
    body = r.block(n_rows * count * size_el)
    if order is None:
        return head + body
    moved: bytes = np.frombuffer(body, dtype=np.uint8).reshape(n_rows, count, size_el)[:, order].tobytes()
    return head + moved
