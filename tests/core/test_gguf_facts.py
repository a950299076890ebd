"""GGUF header facts: local files built with the gguf writer, bad files, and the hub path through a local fake."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.errors import ModelFileError
from hisho.core.models.gguf_facts import read_facts
from hisho.core.models.gguf_hub import facts_from_ranges, list_hub_ggufs, read_hub_facts
from tests.fixtures.gguf_shapes import GEMMA3_4B, LLAMA_31_8B, TINY_LLAMA, Shape, tensor_bytes, write_shape


def test_llama_8b_shape(tmp_path: Path) -> None:
    f = read_facts(write_shape(tmp_path / "l8b.gguf", LLAMA_31_8B))
    assert (f.architecture, f.n_layer, f.n_embd, f.vocab_size, f.context_length) == ("llama", 32, 4096, 128256,
                                                                                      131072)
    assert f.n_head == (32,) * 32 and f.n_head_kv == (8,) * 32
    assert (f.key_length, f.value_length) == (128, 128)
    assert f.quant == "Q4_K_M"
    assert f.weights_bytes == tensor_bytes(LLAMA_31_8B)
    assert f.swa_layers == (False,) * 32 and f.known_architecture
    # Grouped by block: 32 layers plus token_embd, output, output_norm.
    assert sum(1 for k in f.tensor_bytes if k.startswith("blk.")) == 32
    assert {"token_embd", "output", "output_norm"} <= set(f.tensor_bytes)


def test_gemma3_sliding_window_pattern(tmp_path: Path) -> None:
    f = read_facts(write_shape(tmp_path / "g3.gguf", GEMMA3_4B))
    assert f.n_swa == 1024
    # Every 6th layer (5, 11, 17, 23, 29) is global; the rest slide.
    assert [il for il, swa in enumerate(f.swa_layers) if not swa] == [5, 11, 17, 23, 29]
    assert f.key_length == 256


def test_per_layer_kv_heads(tmp_path: Path) -> None:
    shape = Shape(n_layer=4, n_embd=256, n_ff=512, n_head=4, n_head_kv=[2, 1, 0, 2], head_dim=64, vocab=256)
    f = read_facts(write_shape(tmp_path / "per_layer.gguf", shape))
    assert f.n_head_kv == (2, 1, 0, 2)


def test_unknown_architecture_is_flagged_not_refused(tmp_path: Path) -> None:
    shape = Shape(arch="mamba9", n_layer=2, n_embd=64, n_ff=128, n_head=2, n_head_kv=2, head_dim=32, vocab=64)
    f = read_facts(write_shape(tmp_path / "odd.gguf", shape))
    assert f.architecture == "mamba9"
    assert not f.known_architecture


def test_not_gguf(tmp_path: Path) -> None:
    p = tmp_path / "notes.gguf"
    p.write_text("hello, not a model")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        read_facts(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        read_facts(tmp_path / "nope.gguf")


def test_truncated_header(tmp_path: Path) -> None:
    full = write_shape(tmp_path / "full.gguf", TINY_LLAMA)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[:200])
    with pytest.raises(ModelFileError, match="truncated|damaged"):
        read_facts(cut)


def test_truncated_tensor_data(tmp_path: Path) -> None:
    full = write_shape(tmp_path / "full.gguf", TINY_LLAMA)
    with full.open("r+b") as fh:
        fh.truncate(full.stat().st_size // 2)
    with pytest.raises(ModelFileError, match="truncated"):
        read_facts(full, use_cache=False)


def test_facts_cache_round_trip(tmp_path: Path) -> None:
    p = write_shape(tmp_path / "l8b.gguf", LLAMA_31_8B)
    first = read_facts(p)
    again = read_facts(p)  # from the cache
    assert again == first


class FakeHub:
    """fsspec-like: info() and cat_file() over local files, counting the bytes asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requested = 0

    def _path(self, path: str) -> Path:
        return self.root / path.split("/", 2)[2]

    def info(self, path: str) -> dict[str, int]:
        p = self._path(path)
        if not p.exists():
            raise FileNotFoundError(path)
        return {"size": p.stat().st_size}

    def cat_file(self, path: str, start: int, end: int) -> bytes:
        self.requested += end - start
        with self._path(path).open("rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def glob(self, pattern: str) -> list[str]:
        return [f"owner/repo/{p.name}" for p in sorted(self.root.glob("*.gguf"))]


def test_hub_reads_only_the_header(tmp_path: Path) -> None:
    (tmp_path / "hub").mkdir()
    p = write_shape(tmp_path / "hub" / "model-Q4_K_M.gguf", LLAMA_31_8B)
    hub = FakeHub(tmp_path / "hub")
    f = read_hub_facts("owner/repo", "model-Q4_K_M.gguf", fs=hub)
    assert f.source == "hf:owner/repo/model-Q4_K_M.gguf"
    assert f.weights_bytes == tensor_bytes(LLAMA_31_8B)
    assert hub.requested <= 1 << 20 < p.stat().st_size  # one small range request, never the weights
    hub.requested = 0
    assert read_hub_facts("owner/repo", "model-Q4_K_M.gguf", fs=hub) == f  # cached
    assert hub.requested == 0
    assert list_hub_ggufs("owner/repo", fs=hub) == ["model-Q4_K_M.gguf"]


def test_hub_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no file"):
        read_hub_facts("owner/repo", "absent.gguf", fs=FakeHub(tmp_path))


def test_ranges_grow_until_header_complete(tmp_path: Path) -> None:
    # A header larger than the first fetch (a big vocabulary) needs a second, larger range.
    shape = Shape(n_layer=2, n_embd=64, n_ff=128, n_head=2, n_head_kv=2, head_dim=32, vocab=64)
    p = write_shape(tmp_path / "m.gguf", shape)
    data = p.read_bytes()
    calls: list[int] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append(end)
        return data[start:end]

    import hisho.core.models.gguf_hub as gf

    old = gf.HEADER_FIRST_FETCH
    gf.HEADER_FIRST_FETCH = 64
    try:
        f = facts_from_ranges(fetch, len(data), source="x")
    finally:
        gf.HEADER_FIRST_FETCH = old
    assert f.n_layer == 2 and len(calls) >= 2 and calls == sorted(calls)


def test_ranges_not_gguf(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not a GGUF"):
        facts_from_ranges(lambda s, e: b"<html>" + b"\0" * 100, 4096, source="x")


def test_fast_header_walk_matches_gguf_reader(default_model_path: Path, tmp_path: Path) -> None:
    """The fast walk (long vocabulary arrays skipped) gives exactly what gguf.GGUFReader gives."""
    import gguf

    from hisho.core.models import gguf_header
    from hisho.core.models.gguf_facts import facts_from_reader

    for path in (default_model_path, write_shape(tmp_path / "g3.gguf", GEMMA3_4B)):
        fast = gguf_header.read(path)
        slow = gguf.GGUFReader(str(path))
        assert fast.data_offset == slow.data_offset
        assert [(t.name, t.n_bytes, t.data_offset) for t in fast.tensors] == \
            [(t.name, int(t.n_bytes), int(t.data_offset)) for t in slow.tensors]
        size = path.stat().st_size
        assert facts_from_reader(fast, source="x", file_size=size) == \
            facts_from_reader(slow, source="x", file_size=size)


def test_fast_header_walk_refuses_cut_short(tmp_path: Path) -> None:
    from hisho.core.models import gguf_header

    data = write_shape(tmp_path / "m.gguf", TINY_LLAMA).read_bytes()
    with pytest.raises(gguf_header.HeaderError):
        gguf_header.parse(data[:300])
