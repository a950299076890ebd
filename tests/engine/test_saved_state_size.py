"""The planner's saved-state size per memory type (core/planner/state.py) against what llama.cpp really saves for
a sequence: dense grows with every token; a sliding-window model only by its global layers plus a window; a
hybrid by its attention layers plus a fixed recurrent state. Tiny true-shape files (real layer patterns and
windows, random weights)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner.state import STATE_HEADERS, seconds_saved, state_size
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model

N_TOKENS = 1200  # past Gemma-3's 512-token window


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("shape", ["llama-tiny", "gemma-3-tiny", "lfm2-tiny", "granite-4.0-h-tiny"])
def test_saved_state_size_matches_llama_cpp(shape: str) -> None:
    path = true_model(shape, "Q8_0")
    size = state_size(read_facts(path))
    rt = Runtime.load(LoadParams(model_path=str(path), n_ctx=2048, n_threads=2))
    try:
        tokens = [(i * 7919 + 11) % rt.n_vocab for i in range(N_TOKENS)]
        for start in range(0, N_TOKENS, rt.n_batch):
            rt.decode_tokens(0, tokens[start:start + rt.n_batch], want_logits=False)
        actual = int(llama_cpp.llama_state_seq_get_size(rt.ctx, 0))
    finally:
        rt.close()
    predicted = size.saved(N_TOKENS)
    # Beyond rows and cell metadata: a preamble and per-cache / per-layer headers.
    assert predicted <= actual <= predicted + 4096, (shape, predicted, actual)
    dense_guess = N_TOKENS * (size.per_token + size.window_per_cell + 12)
    if shape == "llama-tiny":
        assert size.window == size.recurrent == 0 and predicted == dense_guess
    elif shape == "gemma-3-tiny":
        assert size.window == 512 and size.recurrent == 0
        assert actual < 0.6 * dense_guess  # only 1 global layer of 6 holds every token
        assert size.checkpoint(N_TOKENS) == 512 * (size.window_per_cell + 12)
    else:
        assert size.recurrent > 0 and size.checkpoint(N_TOKENS) == size.recurrent
        assert size.saved(2 * N_TOKENS) - size.saved(N_TOKENS) == N_TOKENS * (size.per_token + 12)  # only attention grows


def test_resume_estimate_uses_the_saved_state() -> None:
    # The same prefill speed: the smaller SWA state restores in less time, so resuming saves more.
    dense = seconds_saved(4096, 4096 * 65536, 250.0, 2e9)
    swa = seconds_saved(4096, 4096 * 65536 // 6 + 512 * 65536 * 5 // 6, 250.0, 2e9)
    assert swa > dense > 0
    assert seconds_saved(10, 10**12, 250.0, 2e9) == 0.0


def test_the_planner_mirrors_the_engines_limits() -> None:
    from hisho.core.kv import marks, session
    from hisho.core.planner import state
    from hisho.engine.kv import chunkwriter
    from hisho.engine.model import prefix

    assert state.CHECKPOINTS_PER_SEQ == prefix.CHECKPOINTS_PER_SEQ
    assert state.CHECKPOINT_BYTES_PER_SEQ == prefix.CHECKPOINT_BYTES_PER_SEQ
    assert marks.COARSE_TOKENS == state.CHUNK_TOKENS == session.DEFAULT_CHUNK_TOKENS
    for memory in ("swa", "recurrent", "hybrid"):
        for gpu in (0, 99):
            assert state.CHUNK_TOKENS % marks.interval_tokens(memory, gpu) == 0  # chunk ends are marks
    assert state.INTERVAL_BYTES_PER_SEQ == prefix.INTERVAL_BYTES_PER_SEQ
    assert state.WARM_ARENA_MAX == chunkwriter.WARM_ARENA_MAX
    assert state.ARENA_ROUND == chunkwriter._ROUND


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("shape", ["llama-tiny", "gemma-3-tiny", "gpt-oss-tiny", "granite-4.0-h-tiny"])
def test_chunked_save_and_checkpoint_match_the_engine(shape: str, tmp_path: Path) -> None:
    """What a save through the scratch sequence really copies (every chunk with its own window cells; on a
    recurrent model each one ending at an interval checkpoint or the save with a recurrent state) and what a
    checkpoint holds, against StateSize.chunked / checkpoint."""
    from hisho.engine.kv.chunkwriter import ChunkWriter
    from hisho.engine.kv.kvstate import KVState

    path = true_model(shape, "Q8_0")
    size = state_size(read_facts(path))
    rt = Runtime.load(LoadParams(model_path=str(path), n_ctx=2048, n_threads=2, n_seq_max=2))
    try:
        tokens = [(i * 7919 + 11) % rt.n_vocab for i in range(N_TOKENS)]
        for start in range(0, N_TOKENS, rt.n_batch):
            rt.decode_tokens(0, tokens[start:start + rt.n_batch], want_logits=False)
        took = rt.keeper.checkpoint(0)
        checkpoint = len(rt.keeper.checkpoints[0][-1].data) if took else 0
        pos_min = int(llama_cpp.llama_memory_seq_pos_min(rt.memory, 0))
        writer = ChunkWriter()
        reports: list[dict[str, object]] = []
        copied = int(KVState(rt, writer).save(0, tmp_path / "kv", 512, reports.append)["copied_bytes"])
        writer.wait_idle()
    finally:
        rt.close()
    held = N_TOKENS - pos_min if size.window else None
    predicted = size.chunked(N_TOKENS, 512, held)
    chunks = -(-N_TOKENS // 512)
    assert predicted - chunks * STATE_HEADERS <= copied <= predicted, (shape, predicted, copied)
    if shape == "llama-tiny":
        assert not took
    else:
        assert took and size.checkpoint(N_TOKENS) <= checkpoint <= size.checkpoint(N_TOKENS) + STATE_HEADERS
    if shape == "granite-4.0-h-tiny":
        # One recurrent state per chunk (the interval checkpoints at 512 and 1024, the end), never the live one
        # copied into every chunk besides.
        assert copied < size.saved(N_TOKENS) + (chunks - 1) * size.recurrent + chunks * STATE_HEADERS
