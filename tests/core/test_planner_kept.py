"""What the engine keeps beside the context, in the plan (core/planner/state.py ``kept_bytes``): partial-state
checkpoints on sliding-window and recurrent models, the save arena, the restore's mapped chunks. The engine's
figures are checked against a real load, save and restore by ``hisho bench plan --kept`` (docs/planner.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hisho.core.kv.session import DEFAULT_CHUNK_TOKENS
from hisho.core.models import identity
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner import state
from hisho.core.planner.memory import Config, estimate
from tests.fixtures.gguf_shapes import GEMMA3_4B, GRANITE_4_H, LFM2_350M, TINY_LLAMA, write_shape

MIB = 1024**2
WINDOW = Config(n_ctx=8192, n_seq_max=2, saves_kv=True)  # as the window loads a model: chat + scratch, KV saved


def facts_of(tmp_path: Path, shape: object, name: str) -> ModelFacts:
    return read_facts(write_shape(tmp_path / f"{name}.gguf", shape), use_cache=False)  # type: ignore[arg-type]


def test_constants_follow_the_app() -> None:
    assert state.CHUNK_TOKENS == DEFAULT_CHUNK_TOKENS
    assert state.IDENTITY_WINDOW == identity.WINDOW


def test_dense_models_keep_no_checkpoints_only_the_save_arena(tmp_path: Path) -> None:
    f = facts_of(tmp_path, TINY_LLAMA, "llama")
    k = state.kept_bytes(f, WINDOW)
    assert k.per_checkpoint == 0
    size = state.state_size(f)
    assert k.arena == -(-size.chunked(8192) // (4 * MIB)) * 4 * MIB  # one arena of a whole sequence's save
    # A restore maps one chunk at a time: one 512-token chunk's rows, not the whole sequence's.
    assert k.restore == 512 * (size.per_token + state.CELL_META) + state.STATE_HEADERS == max(size.chunks(8192))
    assert k.arena <= state.WARM_ARENA_MAX and k.warm_arena == k.arena
    assert k.peak == k.arena + k.restore  # the warm arena under a restore's mapped chunk
    assert state.kept_bytes(f, dataclasses.replace(WINDOW, saves_kv=False)).peak == 0


def test_without_a_scratch_sequence_a_save_is_one_chunk_and_a_restore_maps_it_whole(tmp_path: Path) -> None:
    """serve's streams have no scratch sequence (engine/kv/kvstate.py): each slot's save is one chunk of its
    whole sequence, and a restore maps all of it (the 3B Q4_K_M shape read -4 % with 512-token chunks)."""
    f = facts_of(tmp_path, TINY_LLAMA, "llama")
    serve = Config(n_ctx=8192, n_seq_max=2, kv_unified=False, saves_kv=True)
    k = state.kept_bytes(f, serve)
    whole = state.state_size(f).chunks(4096, 0)  # each stream's 4,096 tokens in one chunk
    assert len(whole) == 1 and k.restore == whole[0]
    assert k.restore > state.kept_bytes(f, WINDOW).restore  # more than one 512-token chunk
    assert k.arenas == 2 and k.arena == 2 * -(-whole[0] // (4 * MIB)) * 4 * MIB
    assert estimate(f, dataclasses.replace(WINDOW, saves_kv=False)).kept == 0


def test_a_sliding_window_checkpoint_is_the_window_and_one_more_exists_at_the_peak(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GEMMA3_4B, "g3")
    cfg = dataclasses.replace(WINDOW, saves_kv=False)
    k = state.kept_bytes(f, cfg)
    # 29 sliding layers x 4 KV heads x 256 x (K + V) x 2 B per cell, the window's 1024 cells.
    window = 1024 * (29 * 4 * 256 * 2 * 2 + state.CELL_META)
    assert window <= k.per_checkpoint <= window + state.STATE_HEADERS + 8 * 8192
    # 116 MiB each: 256 MiB holds two turns' checkpoints, and two interval ones a whole context (one per 4096 tokens
    # of 8192): the mark at 4096 is inside it, the one at 8192 its end, where a reading's checkpoint is a turn's.
    assert k.kept_per_seq == 3 and k.sequences == 1 and k.marks == 1
    # the mark holds the whole window too, and the references of the 4096 tokens it had then
    assert k.mark_bytes == k.per_checkpoint - 8 * (8192 - 4096)
    assert k.peak == 3 * k.per_checkpoint + k.mark_bytes
    b, without = estimate(f, cfg), estimate(f, dataclasses.replace(cfg, n_seq_max=1))
    assert b.kept == k.peak and b.resident - b.kept > 0
    assert without.kept == k.peak  # one sequence either way: the second is the scratch sequence of chunk copies


def test_recurrent_checkpoints_are_capped_by_bytes(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    k = state.kept_bytes(f, dataclasses.replace(WINDOW, saves_kv=False))
    assert 58060800 <= k.per_checkpoint <= 58060800 + state.STATE_HEADERS + 8 * 8192  # the whole Mamba-2 state
    # 256 MiB holds four of 55.4 MiB (the fifth is taken before the oldest goes), and the interval ones beside:
    # every 2048 tokens of 8192 (four fit 256 MiB), three of them inside the context.
    assert k.kept_per_seq == 7 and k.marks == 3
    size = state.state_size(f)
    assert k.mark_bytes == sum(size.checkpoint(m) + state.STATE_HEADERS + 8 * m for m in (2048, 4096, 6144))
    assert k.per_seq == 4 * k.per_checkpoint + k.mark_bytes
    assert k.peak == k.per_seq + k.per_checkpoint
    serving = state.kept_bytes(f, Config(n_ctx=8192, n_seq_max=4, kv_unified=False))
    # 2048-token streams: four turns' and the marks at 512, 1024 and 1536 each.
    assert serving.sequences == 4 and serving.peak == 4 * serving.per_seq + serving.per_checkpoint
    assert serving.per_seq == 4 * serving.per_checkpoint + serving.mark_bytes and serving.marks == 3


def test_a_recurrent_save_carries_a_state_only_where_a_restore_can_end(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    size = state.state_size(f)
    n = 8192
    chunks = n // state.CHUNK_TOKENS
    one = 512 * (size.per_token + state.CELL_META) + state.STATE_HEADERS
    # The last chunk and every fourth (the interval checkpoints 256 MiB keeps of 8192 tokens), not 16 copies.
    assert size.chunks(n) == ([one] * 3 + [one + size.recurrent]) * 3 + [one] * 3 + [one + size.recurrent]
    assert size.chunked(n) == size.saved(n) + 3 * size.recurrent + chunks * state.STATE_HEADERS
    k = state.kept_bytes(f, WINDOW)
    assert k.restore == one + size.recurrent  # the largest chunk a restore maps: the one with the state
    # 120 MiB: kept for the next save. A save holds the four checkpoints and the arena, the fifth checkpoint the
    # warm arena beside it; a restore (its sequence's four dropped, given back: 55 MiB blocks are mapped, not
    # heap) the warm arena and one chunk, then its new checkpoint once the chunk is unmapped.
    assert k.arena <= state.WARM_ARENA_MAX and k.warm_arena == k.arena and not k.retained
    assert k.peak == max(k.per_seq + k.per_checkpoint + k.arena, k.arena + max(k.restore, k.per_checkpoint))


def test_an_arena_over_the_warm_limit_is_let_go_after_its_write(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    k = state.kept_bytes(f, dataclasses.replace(WINDOW, n_ctx=131072))
    assert k.arena > state.WARM_ARENA_MAX and k.warm_arena == 0
    # Only the save holds it: the checkpoint after it and the restore do not.
    assert k.peak == k.per_seq + k.arena
    assert k.allocated == k.per_seq + k.arena
    # Two sequences saving (the API's slots): two arenas, each kept while it is at most the limit.
    two = state.Kept(per_checkpoint=0, kept_per_seq=0, sequences=4, arena=2 * 300 * MIB, restore=MIB,
                     identity=0, arenas=2)
    assert two.warm_arena == two.arena and dataclasses.replace(two, arenas=1).warm_arena == 0


def test_a_sliding_window_save_carries_the_window_only_where_the_cache_still_holds_it(tmp_path: Path) -> None:
    f = facts_of(tmp_path, LFM2_350M, "lfm2")
    size = state.state_size(f)
    # (its short-convolution state is tiny: every chunk end keeps one)
    assert size.window == 0 and size.chunked(1024) == 2 * (512 * (size.per_token + 12) + 4096 + size.recurrent)
    g = facts_of(tmp_path, GEMMA3_4B, "g3")
    s = state.state_size(g)
    row = s.window_per_cell + state.CELL_META
    full = 4096 * (s.per_token + state.CELL_META) + 8 * state.STATE_HEADERS
    # A chunk holds the window cells of its range that the cache still has (the window is longer than a chunk:
    # all of its range), so a save carries the window layers only for the cache's last positions.
    assert s.chunked(4096, 512, window_held=4096) == full + 4096 * row
    # ... and those of the interval checkpoint kept at its end (two of 116 MiB in 256 MiB: every fourth chunk).
    assert s.chunked(4096, 512, window_held=700) == full + 700 * row + 512 * row
    # A 128-token window (GPT-OSS): at most the last 128 cells of each chunk.
    narrow = dataclasses.replace(s, window=128)
    assert narrow.chunked(4096, 512, window_held=4096) == full + 8 * 128 * row


def test_more_memory_is_planned_for_a_window_that_saves(tmp_path: Path) -> None:
    f = facts_of(tmp_path, GEMMA3_4B, "g3")
    saving, not_saving = estimate(f, WINDOW), estimate(f, dataclasses.replace(WINDOW, saves_kv=False))
    assert saving.resident > not_saving.resident and saving.committed > not_saving.committed
    assert any("checkpoints" in n for n in saving.notes) and any("buffer" in n for n in saving.notes)


def test_the_search_fits_a_shorter_context_when_the_load_saves_kv(tmp_path: Path) -> None:
    from hisho.core.machine import Budget
    from hisho.core.planner.search import Candidate, Search

    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    cand = [Candidate(f, None)]
    room = estimate(f, Config(n_ctx=32768, n_seq_max=2)).resident  # exactly 32K without the save buffers
    b = Budget(ram=room, gpu=0, unified=False, headroom=0, metric="resident", explain="test")
    plain = Search(b, min_ctx=2048, target_ctx=32768, n_seq_max=2).best(cand)
    saving = Search(b, min_ctx=2048, target_ctx=32768, n_seq_max=2, saves_kv=True).best(cand)
    assert plain.fits and saving.fits and saving.config.saves_kv
    assert saving.config.n_ctx < plain.config.n_ctx
    assert saving.breakdown.resident <= b.ram


def test_the_bare_resident_is_the_plan_without_kept_state(tmp_path: Path) -> None:
    # bench plan's context-fill cells measure this; the load's own peak still counts when it is the larger.
    f = facts_of(tmp_path, GRANITE_4_H, "granite")
    b = estimate(f, WINDOW)
    assert b.kept > 0 and b.resident_bare == b.resident - b.kept
    assert b.kept_committed <= b.kept and b.committed - b.kept_committed > 0


def test_small_checkpoints_stay_in_the_heap_through_a_save_and_a_restore(tmp_path: Path) -> None:
    from hisho.core.planner.layout import swa_cells
    from tests.fixtures.gguf_shapes import TINY_GEMMA3

    f = facts_of(tmp_path, TINY_GEMMA3, "tiny-g3")
    cfg = dataclasses.replace(WINDOW, n_ctx=2048)
    k = state.kept_bytes(f, cfg)
    # 8 turns', 15 intervals: a mark every 128 tokens on a CPU load (core/kv/marks.py), those strictly inside
    # the context (the one at its end is the turn's checkpoint taken there)
    assert 0 < k.per_checkpoint <= state.HEAP_RETAINS and k.retained and k.kept_per_seq == 23 and k.marks == 15
    # A mark before the window is full holds only the cells read so far: priced at its own size.
    size = state.state_size(f)
    assert size.checkpoint(128) < size.checkpoint(size.window) == size.checkpoint(2048)
    assert k.mark_bytes == sum(size.checkpoint(m) + state.STATE_HEADERS + 8 * m for m in range(128, 2048, 128))
    # 24 checkpoints' slots (the heap keeps the transient one's) beside a save's arena; a restore holds them too,
    # the warm arena and the chunk it mapped.
    slots = 9 * k.per_checkpoint + k.mark_bytes
    assert k.peak == max(slots + max(k.arena, k.identity), slots + k.warm_arena + k.restore)
    held = swa_cells(f, 2048, cfg)
    assert k.restore == max(state.state_size(f).chunks(2048, 512, held))  # one chunk mapped at a time
    # Over glibc's trim threshold too (a wider window: the same layers at 4 x the window): only a free heap top
    # goes back, and a reading's blocks (or another sequence's checkpoints) lie above them.
    wide = state.Kept(per_checkpoint=10 * state.MIB, kept_per_seq=8, sequences=1, arena=k.arena, restore=k.restore,
                      identity=k.identity)
    assert wide.retained and wide.peak == max(90 * state.MIB + k.arena, 90 * state.MIB + k.warm_arena + k.restore)
    streams = dataclasses.replace(wide, sequences=2)
    assert streams.peak == max(170 * state.MIB + k.arena, 170 * state.MIB + k.warm_arena + k.restore)
    assert k.peak > state.kept_bytes(f, dataclasses.replace(cfg, saves_kv=False)).peak == slots
    # Layers offloaded: marks every 512 tokens (a save's chunk), 3 inside 2048.
    assert state.kept_bytes(f, dataclasses.replace(cfg, n_gpu_layers=99)).kept_per_seq == 8 + 3


def test_the_plan_counts_host_memory_per_cell_of_context(tmp_path: Path) -> None:
    from hisho.core.planner.memory import HOST_PER_CELL

    f = facts_of(tmp_path, TINY_LLAMA, "llama")
    short, long = estimate(f, Config(n_ctx=2048)), estimate(f, Config(n_ctx=4096))
    assert long.runtime - short.runtime == HOST_PER_CELL * 2048
