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
parse to the exact length: ``by_position`` then returns None, changes nothing, and the caller keeps the order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class _Stream:
    positions: list[int]
    entries: list[tuple[int, int]]  # each cell's entry (position, sequence ids): its offsets
    blocks: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)  # (offset, shape: cells on axis -2)


def _layout(view: memoryview) -> list[_Stream]:
    """Where each stream's cells and rows are; raises ValueError unless the state parses to its exact length."""
    size = len(view)
    at = 8  # magic and source sequence

    def take(fmt: str) -> tuple[int, ...]:
        nonlocal at
        if at + struct.calcsize(fmt) > size:
            raise ValueError("state shorter than its header says")
        values = struct.unpack_from(fmt, view, at)
        at += struct.calcsize(fmt)
        return values

    def skip(n: int) -> int:
        nonlocal at
        if n < 0 or at + n > size:
            raise ValueError("state shorter than its header says")
        start, at = at, at + n
        return start

    streams: list[_Stream] = []
    while at < size:
        (n_stream,) = take("<I")
        for _ in range(n_stream):
            (count,) = take("<I")
            if count == 0:
                continue
            stream = _Stream([], [])
            for _c in range(count):
                start = at
                pos, n_seq = take("<iI")
                skip(4 * n_seq)
                stream.positions.append(pos)
                stream.entries.append((start, at))
            v_trans, n_layer = take("<II")
            for _layer in range(n_layer):  # K rows
                _t, row = take("<iQ")
                stream.blocks.append((skip(count * row), (count, row)))
            for _layer in range(n_layer):  # V rows, or V elements when transposed
                if not v_trans:
                    _t, row = take("<iQ")
                    stream.blocks.append((skip(count * row), (count, row)))
                else:
                    _t, size_el, n_rows = take("<iII")
                    stream.blocks.append((skip(n_rows * count * size_el), (n_rows, count, size_el)))
            streams.append(stream)
    if at != size:
        raise ValueError("state longer than its cells")
    return streams


def by_position(data: Any) -> bool | None:
    """Reorder each stream's cells of ``data`` (a writable buffer: the ctypes array llama.cpp wrote) by position,
    their K and V rows with them, in place (one layer's rows at a time beside it). True: reordered; False:
    already in order; None: it does not parse as the format above, to its exact length (left untouched)."""
    view = memoryview(data).cast("B")
    try:
        streams = _layout(view)
    except (ValueError, struct.error):
        return None
    changed = False
    for stream in streams:
        order = np.argsort(np.asarray(stream.positions, dtype=np.int64), kind="stable")
        if not (order != np.arange(len(order))).any():
            continue
        changed = True
        first, last = stream.entries[0][0], stream.entries[-1][1]
        entries = [bytes(view[a:b]) for a, b in stream.entries]
        view[first:last] = b"".join(entries[i] for i in order)
        for offset, shape in stream.blocks:
            block = np.frombuffer(view, dtype=np.uint8, count=int(np.prod(shape)), offset=offset).reshape(shape)
            if len(shape) == 2:
                block[:] = block[order]
            else:
                block[:] = block[:, order]
    return changed
