"""The planner knows the model's memory type: sliding-window layers, recurrent state, hybrids, tied embeddings,
and a file with no chat template. Facts come from sparse true-shape headers (tests/fixtures/gguf_shapes.py);
llama.cpp's own figures for the same files are checked in tests/engine/test_probe.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner.memory import Config, estimate, kv_bytes, memory_bytes, recurrent_bytes
from tests.fixtures.gguf_shapes import GEMMA3_4B, GRANITE_4_H, LFM2_350M, MAMBA2, TINY_LLAMA, write_shape

MIB = 1024**2


def facts_of(tmp_path: Path, shape: object, name: str) -> ModelFacts:
    return read_facts(write_shape(tmp_path / f"{name}.gguf", shape), use_cache=False)  # type: ignore[arg-type]


def test_lfm2_is_a_hybrid_of_attention_and_short_convolutions(tmp_path: Path) -> None:
    f = facts_of(tmp_path, LFM2_350M, "lfm2")
    assert f.memory == "hybrid" and f.known_architecture and f.tied_embeddings
    assert [il for il in range(16) if f.attention_layers[il]] == [2, 5, 8, 10, 12, 14]
    assert sum(f.recurrent_layers) == 10
    assert (f.n_embd_r, f.n_embd_s) == (1024 * 2, 0)  # n_embd x (l_cache - 1), no SSM state
    # KV only in the 6 attention layers: 8 KV heads x 64 x (K + V) x 2 B per cell.
    assert kv_bytes(f, Config(n_ctx=4096)) == 6 * 4096 * 8 * 64 * 2 * 2 == 48 * MIB
    # The conv state: one f32 row of n_embd_r per conv layer and sequence, whatever the context.
    assert recurrent_bytes(f, Config(n_ctx=4096)) == recurrent_bytes(f, Config(n_ctx=32768)) == 10 * 2048 * 4
    assert recurrent_bytes(f, Config(n_ctx=4096, n_seq_max=3)) == 3 * 10 * 2048 * 4


def test_granite_hybrid_plan_counts_the_mamba2_state(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    assert f.memory == "hybrid" and f.known_architecture
    assert sum(f.recurrent_layers) == 36 and sum(f.attention_layers) == 4
    # conv: (d_conv - 1) x (d_inner + 2 x n_group x d_state); SSM: d_state x d_inner (llama-hparams.cpp).
    assert (f.n_embd_r, f.n_embd_s) == (3 * (3072 + 2 * 128), 128 * 3072)
    state = 36 * (f.n_embd_r + f.n_embd_s) * 4
    assert state == 58060800  # 55.37 MiB per sequence: llama.cpp logs the same (test_probe.py)
    cfg = Config(n_ctx=4096)
    b = estimate(f, cfg)
    assert b.kv == memory_bytes(f, cfg) == kv_bytes(f, cfg) + state == 4 * 4096 * 4 * 128 * 2 * 2 + state
    assert not any("not modelled" in n for n in b.notes)


def test_mamba2_has_no_kv_cache_only_state(tmp_path: Path) -> None:
    f = facts_of(tmp_path, MAMBA2, "mamba2")
    assert f.memory == "recurrent" and f.known_architecture
    assert kv_bytes(f, Config(n_ctx=8192)) == 0
    assert memory_bytes(f, Config(n_ctx=8192)) == memory_bytes(f, Config(n_ctx=512)) == 48 * (
        3 * (4096 + 256) + 128 * 4096) * 4


def test_swa_streams_per_sequence_when_not_unified(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GEMMA3_4B, "g3")
    assert f.memory == "swa" and f.tied_embeddings
    per_layer_cell = 2 * 4 * 256 * 2
    # Unified, 2 sequences: one stream; sliding layers hold 2 windows + one ubatch.
    assert kv_bytes(f, Config(n_ctx=8192, n_seq_max=2)) == (5 * 8192 + 29 * 2560) * per_layer_cell
    # One stream per sequence (the API's slots): each holds n_ctx / 2 cells and its own window + ubatch.
    split = Config(n_ctx=8192, n_seq_max=2, kv_unified=False)
    assert kv_bytes(f, split) == 2 * (5 * 4096 + 29 * 1536) * per_layer_cell


def test_chat_kind_from_the_header(tmp_path: Path) -> None:
    import dataclasses

    base = facts_of(tmp_path, TINY_LLAMA, "base")
    assert base.chat == "none" and base.base_model  # no template and no ChatML tokens
    chat = facts_of(tmp_path, dataclasses.replace(TINY_LLAMA, chat_template="{{ messages }}"), "chat")
    assert chat.chat == "template" and not chat.base_model


def test_facts_of_an_older_cache_still_load() -> None:
    data = {"source": "x", "architecture": "llama", "name": "", "quant": "Q4_0", "n_layer": 1, "n_embd": 8,
            "n_ff": 8, "n_head": [1], "n_head_kv": [1], "key_length": 8, "value_length": 8, "n_swa": 0,
            "swa_layers": [False], "context_length": 0, "vocab_size": 1, "file_size": 1}
    f = ModelFacts.from_dict(data)
    assert f.memory == "dense" and f.attends(0) and recurrent_bytes(f, Config(n_ctx=256)) == 0


@pytest.mark.parametrize("n_ctx", [256, 4096, 32768])
def test_dense_models_keep_todays_kv(tmp_path: Path, n_ctx: int) -> None:
    f = facts_of(tmp_path, TINY_LLAMA, f"l{n_ctx}")
    assert f.memory == "dense" and memory_bytes(f, Config(n_ctx=n_ctx)) == kv_bytes(f, Config(n_ctx=n_ctx)) == (
        4 * n_ctx * 2 * 64 * 2 * 2)


def test_a_large_vocabulary_peaks_at_load(tmp_path: Path) -> None:
    """Gemma-3's 262K vocabulary on a small model: the load's transient (the GGUF metadata held until the
    loader is done) is above what the filled context needs; resident is at least that peak."""
    import dataclasses

    from hisho.core.planner.memory import Calibration, load_peak

    f = facts_of(tmp_path, dataclasses.replace(TINY_LLAMA, vocab=262144), "bigvocab")
    calib = Calibration(library="test", n_ubatch=512, model_overhead=66 * MIB, context_overhead=0,
                        points={"fa:f16:f16": [(1024, 500 * MIB, 4 * MIB, MIB)]}, model_peak=74 * MIB)
    # The dry run shows 8 MiB of transient; a real load holds ~61 B per token: the larger one counts.
    assert load_peak(f, calib) == 66 * MIB + 262144 * 64
    b = estimate(f, Config(n_ctx=1024), calib, cpu=frozenset())
    assert b.resident == f.weights_bytes + load_peak(f, calib)
    assert any("model load" in n for n in b.notes)
    # A dry run that saw a larger transient wins.
    big = dataclasses.replace(calib, model_peak=100 * MIB)
    assert load_peak(f, big) == 100 * MIB


def test_chat_kind_reads_chatml_special_tokens() -> None:
    from hisho.core.models.gguf_facts import chat_kind
    from hisho.core.models.gguf_header import Field

    def fields(tokens: list[str], types: list[int], template: str = "") -> dict[str, Field]:
        out = {"tokenizer.ggml.tokens": Field(tokens, len(tokens)), "tokenizer.ggml.token_type": Field(types, len(types))}
        if template:
            out["tokenizer.chat_template"] = Field(template)
        return out

    vocab = ["a", "<|im_start|>", "<|im_end|>"]
    assert chat_kind(fields(vocab, [1, 3, 3])) == "chatml"       # a fine-tune that lost its template
    assert chat_kind(fields(vocab, [1, 1, 1])) == "none"         # the markers are ordinary text tokens
    assert chat_kind(fields(vocab[:2], [1, 3])) == "none"        # only one of them
    assert chat_kind(fields(vocab, [1, 1, 1], "{{ x }}")) == "template"


def test_chat_kind_of_a_real_vocabulary_without_template(default_model_path: Path, tmp_path: Path) -> None:
    """The fast header walk skips the token list; the kind still comes out right: the bundled model with its
    template key renamed keeps ChatML tokens ("chatml"); with the markers renamed too it is a base model."""
    data = bytearray(default_model_path.read_bytes())
    data = data.replace(b"tokenizer.chat_template", b"tokenizer.chat_templatX")
    (tmp_path / "chatml.gguf").write_bytes(bytes(data))
    assert read_facts(tmp_path / "chatml.gguf", use_cache=False).chat == "chatml"
    data = data.replace(b"<|im_start|>", b"<|im_stbrt|>").replace(b"<|im_end|>", b"<|im_enf|>")
    (tmp_path / "base.gguf").write_bytes(bytes(data))
    assert read_facts(tmp_path / "base.gguf", use_cache=False).chat == "none"
    assert read_facts(default_model_path, use_cache=False).chat == "template"
