"""Weight repacking (core/planner/repack.py): ggml's rules per CPU, which weights of a file they pick, and how
the memory model prices a load with and without mmap. Headers only: sparse files (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path

from gguf import GGMLQuantizationType

from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner.memory import Config, estimate
from hisho.core.planner.repack import features_from_system_info, repack_plan, repacked_type, use_mmap
from tests.fixtures.gguf_shapes import TINY_LLAMA, Shape, tensor_bytes, write_shape

AVX2 = frozenset({"avx2"})
NEON = frozenset({"neon", "dotprod"})


def test_rules_follow_ggml() -> None:
    assert repacked_type("Q4_0", 4096, AVX2) and repacked_type("Q4_K", 4096, AVX2)
    assert repacked_type("IQ4_NL", 1024, AVX2)
    assert not repacked_type("Q4_0", 4092, AVX2)          # rows must divide by the 8-row interleave
    for t in ("Q5_K", "Q6_K", "Q8_0", "IQ4_XS", "Q4_1", "Q5_0", "F16"):
        assert not repacked_type(t, 4096, AVX2), t        # no x86 kernels for these
    assert not repacked_type("Q2_K", 4096, AVX2) and repacked_type("Q2_K", 4096, AVX2 | {"avx512"})
    assert repacked_type("Q8_0", 4092, NEON) and repacked_type("Q6_K", 4096, NEON)
    assert not repacked_type("Q4_0", 4096, frozenset())


def test_features_from_system_info() -> None:
    text = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | OPENMP = 1 |"
    assert features_from_system_info(text) == AVX2
    arm = "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | DOTPROD = 1 | SVE = 0 |"
    assert features_from_system_info(arm) == {"neon", "matmul_int8", "dotprod"}


def q4_0_llama(tmp_path: Path, *, tied: bool = False) -> Path:
    shape = Shape(**{**TINY_LLAMA.__dict__, "weight_type": GGMLQuantizationType.Q4_0, "file_type": 2})
    path = write_shape(tmp_path / "q40.gguf", shape)
    assert tensor_bytes(shape) == read_facts(path).weights_bytes
    return path


def test_facts_pick_matmul_weights_but_not_the_embedding(tmp_path: Path) -> None:
    facts = read_facts(q4_0_llama(tmp_path))
    moved, dup, largest = repack_plan(facts, AVX2)
    embd = facts.tensor_bytes["token_embd"]
    # Every Q4_0 matrix except token_embd (read by GET_ROWS): the layers and the separate output.
    norms = (2 * TINY_LLAMA.n_layer + 1) * TINY_LLAMA.n_embd * 4  # F32 vectors
    assert moved == facts.weights_bytes - embd - norms
    assert dup == 0 and largest > 0
    assert repack_plan(facts, frozenset()) == (0, 0, 0)


def test_estimate_prices_repacked_weights_once_without_mmap(tmp_path: Path) -> None:
    facts = read_facts(q4_0_llama(tmp_path))
    moved, _dup, largest = repack_plan(facts, AVX2)
    plain = estimate(facts, Config(n_ctx=1024), cpu=frozenset())
    engine = estimate(facts, Config(n_ctx=1024), cpu=AVX2)
    forced = estimate(facts, Config(n_ctx=1024, use_mmap=True), cpu=AVX2)
    assert plain.mmap and plain.repacked == 0
    assert not engine.mmap and engine.repacked == moved and not use_mmap(moved)
    assert engine.resident == plain.resident + largest     # held once; one read buffer stays in the heap
    assert forced.resident == plain.resident + moved       # mapped pages beside the repacked copy
    assert engine.committed == plain.committed == forced.committed
    assert any("repacks" in n for n in engine.notes)


def test_hub_plan_uses_the_same_rule(tmp_path: Path) -> None:
    from hisho.core.models.gguf_hub import read_hub_facts
    from tests.core.test_gguf_facts import FakeHub

    (tmp_path / "hub").mkdir()
    local = q4_0_llama(tmp_path / "hub")
    remote = read_hub_facts("owner/repo", local.name, fs=FakeHub(tmp_path / "hub"))
    assert remote.matmul_weights == read_facts(local).matmul_weights
    b = estimate(remote, Config(n_ctx=1024), cpu=AVX2)
    assert b.estimate and not b.mmap and b.repacked == repack_plan(remote, AVX2)[0]


def test_tied_embedding_copy_is_priced(tmp_path: Path) -> None:
    # Gemma-3-shaped (no output.weight): the output layer reads token_embd again; Q4_0 on AVX2 repacks that copy.
    from tests.fixtures.gguf_shapes import TINY_GEMMA3

    shape = Shape(**{**TINY_GEMMA3.__dict__, "weight_type": GGMLQuantizationType.Q4_0, "file_type": 2})
    facts = read_facts(write_shape(tmp_path / "g.gguf", shape))
    moved, dup, _largest = repack_plan(facts, AVX2)
    assert dup == facts.tensor_bytes["token_embd"] and moved > 0
    b = estimate(facts, Config(n_ctx=1024), cpu=AVX2)
    assert b.weights == facts.weights_bytes + dup


def test_load_params_say_how_to_load(tmp_path: Path) -> None:
    """apply_plan tells the engine to read (not map) a file whose weights this CPU repacks, and to map one
    whose weights it does not; with the CPU unknown it leaves the choice to the engine."""
    import dataclasses

    from hisho.core.engine.protocol import LoadParams
    from hisho.core.machine import from_dict
    from hisho.core.planner.gate import apply_plan

    path = q4_0_llama(tmp_path)
    base = {"platform": "linux", "ram_total": 16 << 30, "ram_available": 12 << 30, "cpu_threads": 8}
    for features, expect in ((["avx2"], False), (["sse3"], True), ([], None)):
        machine = from_dict({**base, "cpu_features": features})
        out = apply_plan(LoadParams(model_path=str(path), n_ctx=1024), want_gpu_layers=0, machine=machine)
        assert out.use_mmap is expect, features
        # (flash attention is the plan's too: docs/flash-attention.md)
        assert dataclasses.replace(out, use_mmap=None, flash_attn=True) == LoadParams(model_path=str(path), n_ctx=1024)
