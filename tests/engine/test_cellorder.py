"""A sliding-window checkpoint's cells put in position order, in place: every row of K and V moves with its cell, an
already ordered state is left as it is, and so is anything that does not parse to its exact length."""

from __future__ import annotations

import ctypes
import struct

import llama_cpp

from hisho.core.engine.protocol import LoadParams
from hisho.engine.model.cellorder import by_position
from hisho.engine.model.prefix import PARTIAL
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model


def state(positions: list[int], v_trans: bool, layers: int = 2, row: int = 4, n_embd_v: int = 3) -> bytes:
    """One stream; cell i's K row is ``row`` bytes of (layer, i); its V elements are (layer, i, j)."""
    out = [struct.pack("<Ii", 0xAF143CD8, 0), struct.pack("<II", 1, len(positions))]
    out += [struct.pack("<iIi", p, 1, 0) for p in positions]
    out.append(struct.pack("<II", int(v_trans), layers))
    for layer in range(layers):
        out.append(struct.pack("<iQ", 1, row) + b"".join(bytes([layer, i] * (row // 2)) for i in range(len(positions))))
    for layer in range(layers):
        if v_trans:
            out.append(struct.pack("<iII", 1, 2, n_embd_v))
            out += [bytes([layer * 16 + j, i]) for j in range(n_embd_v) for i in range(len(positions))]
        else:
            out.append(struct.pack("<iQ", 1, row) + b"".join(bytes([9, i] * (row // 2)) for i in range(len(positions))))
    return b"".join(out)


def ordered(data: bytes) -> tuple[bool | None, bytes]:
    buf = bytearray(data)
    return by_position(buf), bytes(buf)


def test_cells_and_their_rows_move_together() -> None:
    for v_trans in (False, True):
        ring = [7, 8, 4, 5, 6]  # a wrapped ring: the newest cells took the oldest slots
        cells = [ring.index(p) for p in sorted(ring)]  # the original slot of each cell, in position order
        changed, got = ordered(state(ring, v_trans))
        assert changed is True and len(got) == len(state(ring, v_trans))
        metas = got[16:16 + 12 * len(ring)]
        assert [struct.unpack_from("<i", metas, 12 * i)[0] for i in range(len(ring))] == sorted(ring)
        k0 = got[16 + 12 * len(ring) + 8 + 12:][:4 * len(ring)]
        assert [k0[4 * i + 1] for i in range(len(ring))] == cells  # layer 0's K rows, in the new order
        if v_trans:
            tail = got[-(3 * len(ring) * 2):]  # layer 1's V elements: row j, then each cell
            assert [tail[2 * i + 1] for i in range(len(ring))] == cells
            assert [tail[2 * len(ring) * j] for j in range(3)] == [16, 17, 18]  # rows stay rows
        else:
            v1 = got[-4 * len(ring):]
            assert [v1[4 * i + 1] for i in range(len(ring))] == cells


def test_an_ordered_state_is_left_as_it_is() -> None:
    data = state([1, 2, 3], v_trans=True)
    assert ordered(data) == (False, data)


def test_what_does_not_parse_is_left_alone() -> None:
    data = state([3, 1, 2], v_trans=False)
    for bad in (data[:-1], data + b"\0"):  # cut short; a part it does not know (a recurrent state, an extension)
        assert ordered(bad) == (None, bad)


def test_a_gemma3_window_checkpoint_sorts_and_loads_back() -> None:
    rt = Runtime.load(LoadParams(model_path=str(true_model("gemma-3-tiny", "Q8_0")), n_ctx=4096, n_seq_max=2,
                                 n_threads=1))
    try:
        # 1,700 tokens through a window cache of 512 x 2 + 512 cells: the ring has wrapped.
        assert rt.decode_tokens(0, [1000 + i % 30000 for i in range(1700)], want_logits=False, checkpoints=False)
        size = int(llama_cpp.llama_state_seq_get_size_ext(rt.ctx, 0, PARTIAL))
        buf = (ctypes.c_uint8 * size)()
        assert int(llama_cpp.llama_state_seq_get_data_ext(rt.ctx, buf, size, 0, PARTIAL)) == size
        raw = bytes(buf)
        assert by_position(buf) is True and len(bytes(buf)) == len(raw) and bytes(buf) != raw
        (count,) = struct.unpack_from("<I", buf, 12)
        positions = [struct.unpack_from("<i", buf, 16 + 12 * i)[0] for i in range(count)]
        assert positions == sorted(positions) and positions[-1] == 1699 and count >= 512
        assert int(llama_cpp.llama_state_seq_set_data_ext(rt.ctx, buf, size, 0, PARTIAL)) == size
        assert int(llama_cpp.llama_memory_seq_pos_min(rt.memory, 0)) == positions[0]
        again = (ctypes.c_uint8 * size)()  # loaded back in order, it reads out in order, byte for byte
        assert int(llama_cpp.llama_state_seq_get_data_ext(rt.ctx, again, size, 0, PARTIAL)) == size
        assert bytes(again) == bytes(buf) and by_position(again) is False
    finally:
        rt.close()
