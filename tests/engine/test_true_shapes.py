"""True-shape models (hisho.bench.shapes): the tensor tables are what llama.cpp expects, the files load and
decode through the engine's Runtime, and the engine loads models whose weights get repacked without mmap."""

from __future__ import annotations

import math

import llama_cpp
import pytest

from hisho.bench.shapes import MEMORY_TYPES, QUANTS, SHAPES, VALUES_PER_BLOCK, nbytes, tensor_table
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner.repack import repacked_bytes
from hisho.engine.decode.reply import generate
from hisho.engine.lib.llama_setup import cpu_features, mmap_policy
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model

MIB = 1024 * 1024
# Sizes of the files people download (MiB, roughly; ours carry the bundled tokenizer, so they differ by the
# vocabulary's strings): every mix must land near them.
EXPECTED_MIB = {("llama-3.2-1b", "Q4_0"): 728, ("llama-3.2-3b", "Q4_K_M"): 1918, ("qwen2.5-1.5b", "Q8_0"): 1565,
                ("gemma-3-1b", "Q4_K_M"): 762}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("quant", QUANTS)
def test_tensor_tables_are_valid(shape: str, quant: str) -> None:
    table = tensor_table(SHAPES[shape], quant)
    names = [t[0] for t in table]
    assert len(names) == len(set(names))
    for name, dims, qtype in table:
        assert dims[0] % VALUES_PER_BLOCK[qtype] == 0, (name, dims, qtype)  # rows divide into blocks
    total = sum(nbytes(d, q) for _, d, q in table)
    if (shape, quant) in EXPECTED_MIB:
        assert math.isclose(total / MIB, EXPECTED_MIB[(shape, quant)], rel_tol=0.01)


def test_gemma_rows_fall_back_like_llama_quantize() -> None:
    types = {name: q for name, _d, q in tensor_table(SHAPES["gemma-3-1b"], "IQ4_XS")}
    assert types["blk.5.attn_q.weight"] == "IQ4_NL"      # 1152-wide rows: IQ4_XS -> IQ4_NL
    assert types["blk.5.ffn_down.weight"] == "IQ4_XS"    # 6912-wide rows divide into 256
    assert types["token_embd.weight"] == "Q8_0"          # tied output, rows not a multiple of 256


def test_llama_1b_q4_0_loads_once_and_decodes() -> None:
    path = true_model("llama-3.2-1b", "Q4_0")
    facts = read_facts(path)
    assert facts.n_layer == 16 and facts.vocab_size == 128256
    moved, dup = repacked_bytes(facts, cpu_features())
    expect_repack = "avx2" in cpu_features()
    assert (moved > 500 * MIB) == expect_repack and dup == 0
    assert mmap_policy(str(path)) is (not expect_repack)
    rt = Runtime.load(LoadParams(model_path=str(path), n_ctx=512))
    try:
        assert rt.mmap is (not expect_repack)
        prompt = rt.prompt_tokens({"messages": [{"role": "user", "content": "Hello"}]})
        events = list(generate(rt, 0, prompt, Sampling(temperature=0.0, max_tokens=3, ignore_eos=True),
                                  lambda: False))
        stats = events[-1]
        assert stats.completion_tokens == 3  # type: ignore[union-attr]
    finally:
        rt.close()


@pytest.mark.parametrize("memory", sorted(MEMORY_TYPES))
def test_each_memory_type_loads_as_that_type_and_decodes(memory: str) -> None:
    """The tiny shape of each memory type is what llama.cpp makes of the real one: its window, whether it is a
    hybrid, and a reply that depends on the prompt."""
    shape = SHAPES[MEMORY_TYPES[memory][0]]
    rt = Runtime.load(LoadParams(model_path=str(true_model(shape.name, "Q8_0")), n_ctx=1024, n_seq_max=2))
    try:
        assert llama_cpp.llama_model_n_swa(rt.model) == shape.sliding_window
        assert bool(llama_cpp.llama_model_is_hybrid(rt.model)) is (shape.memory == "hybrid")
        replies = []
        for first in (1000, 20000):  # two prompts with no token in common
            prompt = list(range(first, first + 64))
            events = list(generate(rt, 0, prompt, Sampling(temperature=0.0, max_tokens=6, ignore_eos=True),
                                      lambda: False))
            replies.append(events[-1].tokens)  # type: ignore[union-attr]
            rt.seq_rm(0, 0)
        assert all(len(r) == 6 for r in replies) and replies[0] != replies[1]
    finally:
        rt.close()
