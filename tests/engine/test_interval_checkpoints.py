"""A request that parts from a long prompt in the middle reads only what follows the nearest interval checkpoint
(hisho.engine.model.prefix "Interval checkpoints"), in memory, through the API's slots and after a restart from
the chunk files, on every memory type, and its answer is the one a fresh prefill of the same tokens gives.

Tiny true-shape files (random weights: a missing or misplaced cell changes greedy output). The long prompt is
long enough that the window cache no longer holds the window before the divergence (asserted), so only a
checkpoint can serve it. Tokens read come from the engine's own figures (``cached_tokens``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from hisho.bench.shapes import MEMORY_TYPES, SHAPES
from hisho.core.db import Database
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.kv.index import KVIndex
from hisho.engine.decode.reply import generate
from hisho.engine.decode.serving import Job, ServingBatch
from hisho.engine.kv.chunkwriter import ChunkWriter
from hisho.engine.kv.kvstate import KVState
from hisho.engine.model import prefix
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.5, max_tokens=8, ignore_eos=True)
COMPARE = 200
HEADER = [5000, 5001, 5002]
LONG = 2700     # past the window cache of the divergence point (asserted in ``branch_needs_a_checkpoint``)
PART = 1300     # where the branch parts: 20 tokens after the mark at 1280, between the old 512-token ones


def toks(seed: int, n: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(1000, 40000) for _ in range(n)]


LONG_PROMPT = toks(70, LONG) + HEADER
BRANCH = LONG_PROMPT[:PART] + toks(71, 40) + HEADER


@pytest.fixture(scope="module", params=sorted(MEMORY_TYPES))
def shape(request: pytest.FixtureRequest) -> str:
    return MEMORY_TYPES[str(request.param)][0]


def load(shape: str) -> Runtime:
    return Runtime.load(LoadParams(model_path=str(true_model(shape, "Q8_0")), n_ctx=4096, n_seq_max=2,
                                   n_threads=1, n_ubatch=512))


@pytest.fixture(scope="module")
def rt(shape: str) -> Iterator[Runtime]:
    runtime = load(shape)
    yield runtime
    runtime.close()


def answer(rt: Runtime, prompt: list[int], n: int = COMPARE) -> tuple[list[int], int]:
    """(greedy reply, tokens the engine took from what it held) for ``prompt`` on sequence 0."""
    stats: Any = list(generate(rt, 0, prompt, replace(GREEDY, max_tokens=n), lambda: False))[-1]
    return list(stats.tokens), int(stats.cached_tokens)


def fresh(rt: Runtime, prompt: list[int], n: int = COMPARE) -> list[int]:
    rt.clear()
    got, cached = answer(rt, prompt, n)
    assert cached == 0
    return got


# Where the branch resumes in memory: the mark before the divergence (marks every 128 tokens on a CPU load,
# hisho.core.kv.marks; with 512-token marks it was 1024). A dense cache is cut anywhere, but a reply's prompt
# slice (512 tokens, n_batch) is read again whole (PrefixKeeper._slice_start): there, 1024.
def resumed(shape: str) -> int:
    return 1024 if SHAPES[shape].memory == "dense" else 1280


def branch_needs_a_checkpoint(rt: Runtime, shape: str) -> None:
    s = SHAPES[shape]
    if s.memory == "swa":
        pos_min = int(llama_cpp.llama_memory_seq_pos_min(rt.memory, 0))
        assert pos_min > PART - s.sliding_window, "the window cache still holds the divergence: nothing tested"


def compared(shape: str) -> int:
    # A dense cut inside a slice of the long prompt keeps cells read in a 512-token slice that a fresh prefill
    # reads in a shorter one (docs/kv-format.md "Numerics"): only the first tokens compare there.
    return 8 if SHAPES[shape].memory == "dense" else COMPARE


def test_a_branch_in_the_middle_of_a_long_prompt_reads_only_the_rest(rt: Runtime, shape: str) -> None:
    want = fresh(rt, BRANCH, compared(shape))
    fresh(rt, LONG_PROMPT, 4)
    branch_needs_a_checkpoint(rt, shape)
    got, cached = answer(rt, BRANCH, compared(shape))
    assert cached == resumed(shape)  # read: len(BRANCH) - 1280 tokens, not all of them
    assert got == want


def test_the_branch_restores_from_disk_after_a_restart(rt: Runtime, shape: str, tmp_path: Path) -> None:
    want = fresh(rt, BRANCH, compared(shape))
    fresh(rt, LONG_PROMPT, 4)
    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    writer = ChunkWriter()
    kv = KVState(rt, writer)
    reports: list[dict[str, Any]] = []
    kv.save(0, tmp_path / "kv", 512, reports.append)
    assert writer.wait_idle(60) and reports
    index.record_save("conv:1", kv.fingerprint, reports[0]["chunks"], reports[0]["model"])
    again = load(shape)  # a new engine: no checkpoint in memory
    try:
        kv2 = KVState(again, writer)
        match = index.lookup(kv2.fingerprint, BRANCH)
        # Dense chunks are cut anywhere (only the first tokens compare: cells read in a longer slice); the
        # others end at the mark before the divergence, exactly.
        dense = SHAPES[shape].memory == "dense"
        point = PART if dense else 1024
        assert match.keep == point
        assert kv2.restore(0, match.request(), match.keep, BRANCH)["restored"] == point
        got, cached = answer(again, BRANCH, compared(shape))
        assert cached == point
        assert got == want
    finally:
        again.close()


def test_fewer_kept_checkpoints_change_no_number(rt: Runtime, shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint dearer to restore than its marks' tokens are to read again is not kept: the spacing doubles (every
    reading still stops at each mark, so the numbers stay those of a fresh prefill)."""
    if SHAPES[shape].memory == "dense":
        assert rt.keeper.marks(0, 5000) == []
        return
    want = fresh(rt, BRANCH)
    rt.clear()
    monkeypatch.setattr(rt.keeper, "prefill_tok_s", 1e12)  # reading looks free: only the budget rule is left
    monkeypatch.setattr(rt.keeper, "note_speed", lambda n, s: None)
    monkeypatch.setattr(prefix, "INTERVAL_BYTES_PER_SEQ", 1)  # ... and it allows one checkpoint per context
    step = rt.keeper.interval_spacing(1)
    assert step > PART
    answer(rt, LONG_PROMPT, 4)
    assert sorted(c.n for c in rt.keeper.checkpoints[0] if c.interval) == list(range(step, LONG, step))
    monkeypatch.setattr(prefix, "INTERVAL_BYTES_PER_SEQ", 1 << 40)
    got, cached = answer(rt, BRANCH)
    assert cached == 0 and got == want  # nothing at or before the divergence: read whole, the same answer


def test_the_interval_rule() -> None:
    class Ctx:
        n_ctx_seq = 8192

    keeper = prefix.PrefixKeeper.__new__(prefix.PrefixKeeper)
    keeper.rt = Ctx()
    keeper.interval = 512  # marks of a load with layers offloaded (hisho.core.kv.marks)
    keeper.prefill_tok_s = 250.0
    # Gemma-3-1B's window (11 MiB) restores in ~12 ms; 512 tokens read in 2 s: every mark is kept.
    assert keeper.interval_spacing(11 << 20) == 512
    # Reading fast (a GPU, 20,000 tokens/s): 512 tokens take 26 ms, a 55 MiB Mamba state 58 ms: three marks'
    # worth, rounded up to a power of two (kept ones stay on a save's chunk ends): every fourth.
    keeper.prefill_tok_s = 20000.0
    Ctx.n_ctx_seq = 4096
    assert keeper.interval_spacing(55 << 20) == 4 * 512
    # The budget: 32K tokens of 55 MiB states at 512 would be 3.5 GiB; 256 MiB holds 4, so one per 8192 tokens.
    keeper.prefill_tok_s = 250.0
    Ctx.n_ctx_seq = 32768
    assert keeper.interval_spacing(55 << 20) == 8192
    # A CPU load marks every 128 tokens. Gemma-3-270M's 7.5 MiB window against 128 tokens read at 300/s (0.4 s):
    # each kept at 4K; at 8K the budget (34 windows in 256 MiB) keeps every second; at 32K every eighth.
    keeper.interval, keeper.prefill_tok_s = 128, 300.0
    Ctx.n_ctx_seq = 4096
    assert keeper.interval_spacing(15 << 19) == 128
    Ctx.n_ctx_seq = 8192
    assert keeper.interval_spacing(15 << 19) == 256
    Ctx.n_ctx_seq = 32768
    assert keeper.interval_spacing(15 << 19) == 1024


def serve(rt: Runtime, prompt: list[int], n: int) -> tuple[list[int], int]:
    batch = ServingBatch(rt)
    out: list[int] = []
    done: dict[str, Any] = {}

    def emit(event: dict[str, Any]) -> None:
        if event.get("ev") == "token":
            out.append(int(event["token"]))
        elif event.get("ev") == "done":
            done.update(event)

    batch.add(Job(1, prompt, replace(GREEDY, max_tokens=n), emit, emit))
    while batch.busy:
        batch.step()
    return out, int(done["cached_tokens"])


def test_an_api_request_parting_from_a_longer_one_in_the_middle(rt: Runtime, shape: str) -> None:
    dense = SHAPES[shape].memory == "dense"
    n = 8 if dense else COMPARE
    rt.clear()
    want, _ = serve(rt, BRANCH, n)
    rt.clear()
    serve(rt, LONG_PROMPT, 4)
    branch_needs_a_checkpoint(rt, shape)
    got, cached = serve(rt, BRANCH, n)
    assert cached == (PART if dense else 1280)  # a dense slot's cells are cut anywhere (serving.py)
    assert got == want
