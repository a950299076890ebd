"""A model file changed in place never gets the KV computed by its old weights (issue 16, point 2).

The file keeps its size, path and inode, and its mtime is put back after the change (``cp -p``/``rsync -t`` do
the same); only bytes deep inside the tensor data differ. The first check restores from the unchanged copy, so
the test can tell "nothing restored because the model changed" from "nothing restored at all".
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from hisho.core.models import gguf_header

CHUNK = 64
HISTORY = [{"role": "user", "content": " ".join(f"Item {i} weighs {i * 3 % 17} kg." for i in range(40))},
           {"role": "assistant", "content": "Noted."}]
QUESTION = [{"role": "user", "content": "Which item is heaviest?"}]


def tensor(path: Path, name: str) -> gguf_header.Tensor:
    return next(t for t in gguf_header.read(path).tensors if t.name == name)


def in_place(path: Path, edit: Callable[[Path], None]) -> None:
    """Change the file without a new inode, size or mtime."""
    st = path.stat()
    edit(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def flip_ffn_down_byte(path: Path) -> None:
    t = tensor(path, "blk.15.ffn_down.weight")
    with open(path, "r+b") as fh:
        fh.seek(t.data_offset + t.n_bytes // 2)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x01]))


def zero_attn_kv(path: Path) -> None:
    with open(path, "r+b") as fh:
        for name in ("blk.15.attn_k.weight", "blk.15.attn_v.weight"):
            t = tensor(path, name)
            fh.seek(t.data_offset)
            fh.write(bytes(t.n_bytes))


def restored_tokens(model: Path, index: KVIndex, full: list[int]) -> tuple[int, str]:
    with EngineClient() as engine:
        engine.load(LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2))
        session = KVSession(engine, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        try:
            return session.restore("conv:1", full).restored, session.fingerprint()
        finally:
            session.close()


@pytest.mark.parametrize("change", [flip_ffn_down_byte, zero_attn_kv], ids=["ffn_down_byte", "attn_kv_zeroed"])
def test_a_model_changed_in_place_never_restores_stale_kv(default_model_path: Path, tmp_path: Path,
                                                         change: Callable[[Path], None]) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(default_model_path, model)
    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    with EngineClient() as engine:
        engine.load(LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2))
        conv = engine.tokenize(messages=HISTORY, add_generation_prompt=False)
        full = engine.tokenize(messages=HISTORY + QUESTION)
        engine.call("prefill", {"seq": 0, "tokens": conv})
        session = KVSession(engine, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        session.save("conv:1")
        assert session.flush(60)
        session.close()
    restored, fp_before = restored_tokens(model, index, full)
    assert restored == len(conv)  # the unchanged file restores everything: the check below can fail

    in_place(model, change)
    restored, fp_after = restored_tokens(model, index, full)
    print(f"\n{change.__name__}: {restored} stale KV tokens restored (of {len(conv)} saved)")  # figure (-s)
    assert fp_after != fp_before
    assert restored == 0
