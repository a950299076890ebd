"""Draft-free speculation (hisho.engine.decode.speculate): greedy replies are the same tokens with and without it, on
the bundled model (real weights, text that repeats its source) and on a true-shape file whose weights llama.cpp
repacks; the cache holds exactly the reply afterwards; it never drafts where it cannot be exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.engine.decode import speculate
from hisho.engine.decode.reply import generate
from hisho.engine.lib.llama_setup import GenStats
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model

pytestmark = pytest.mark.timeout(1200)
SOURCE = ("The lighthouse stood on a rock at the end of the bay. Every night the keeper climbed the ninety steps, "
          "lit the lamp, wound the clockwork that turned the lens, and wrote the weather in a blue book. ") * 3


@pytest.fixture(autouse=True)
def _measured_again() -> Iterator[None]:
    speculate.forget_measurements()
    yield
    speculate.force(None)
    speculate.forget_measurements()


def _reply(rt: Runtime, prompt: list[int], sampling: Sampling, drafts: bool) -> GenStats:
    speculate.force(drafts)
    rt.seq_rm(0, 0)
    stats = list(generate(rt, 0, prompt, sampling, lambda: False))[-1]
    assert isinstance(stats, GenStats)
    held = rt.seqs[0]
    # The cache holds the prompt and the reply (but its last token when it stopped at the length: never
    # decoded), nothing of a draft.
    assert held == prompt + (stats.tokens[:-1] if stats.stop_reason == "length" else stats.tokens)
    assert int(llama_cpp.llama_memory_seq_pos_max(rt.memory, 0)) == len(held) - 1
    return stats


@pytest.mark.parametrize("repeat_penalty", [1.0, 1.1])
def test_bundled_model_same_reply_with_and_without_drafts(default_model_path: Path, repeat_penalty: float) -> None:
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=2048))
    try:
        prompt = rt.prompt_tokens({"messages": [
            {"role": "user", "content": f"Copy this text word for word:\n\n{SOURCE}"}]})
        sampling = Sampling(temperature=0.0, repeat_penalty=repeat_penalty, max_tokens=96)
        plain = _reply(rt, prompt, sampling, drafts=False)
        drafted = _reply(rt, prompt, sampling, drafts=True)
        assert plain.speculation is None
        assert drafted.speculation is not None and drafted.speculation["accepted"] > 0
        assert drafted.tokens == plain.tokens
        assert drafted.stop_reason == plain.stop_reason
    finally:
        rt.close()


def test_true_shape_same_reply_with_and_without_drafts() -> None:
    # Q4_0: the weights llama.cpp repacks on AVX2 CPUs, where a batch runs other kernels than one token.
    rt = Runtime.load(LoadParams(model_path=str(true_model("llama-tiny", "Q4_0")), n_ctx=512))
    try:
        prompt = list(range(1000, 1040)) * 3   # a repeating source: drafts are proposed at once
        sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=48, ignore_eos=True)
        plain = _reply(rt, prompt, sampling, drafts=False)
        drafted = _reply(rt, prompt, sampling, drafts=True)
        assert drafted.speculation is not None and drafted.speculation["batches"] > 0
        assert drafted.tokens == plain.tokens
    finally:
        rt.close()


def test_never_drafts_when_sampling_or_for_a_sliding_window(default_model_path: Path) -> None:
    speculate.force(True)
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
    try:
        assert not speculate.wanted(rt, 0, Sampling(temperature=0.7), 1)
        assert speculate.wanted(rt, 0, Sampling(temperature=0.0), 1)
    finally:
        rt.close()
    rt = Runtime.load(LoadParams(model_path=str(true_model("gemma-3-tiny", "Q8_0")), n_ctx=1024))
    try:
        assert not rt.keeper.dense
        assert not speculate.wanted(rt, 0, Sampling(temperature=0.0), 1)
    finally:
        rt.close()


def test_off_unless_asked_for(default_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HISHO_SPECULATE", raising=False)
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
    try:
        assert not speculate.wanted(rt, 0, Sampling(temperature=0.0), 1)
        assert not speculate._MEASURED
    finally:
        rt.close()


def test_measured_once_per_model_and_leaves_the_cache_as_it_was(default_model_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_SPECULATE", "1")
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
    try:
        rt.decode_tokens(0, list(range(100, 140)), want_logits=False)
        speculate.wanted(rt, 0, Sampling(temperature=0.0), 7)
        assert len(speculate._MEASURED) == 1
        assert int(llama_cpp.llama_memory_seq_pos_max(rt.memory, 0)) == 39 and len(rt.seqs[0]) == 40
    finally:
        rt.close()
