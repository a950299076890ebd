"""Freed heap blocks go back to the OS when a whole context's state is let go (``give_back_heap``)."""

from __future__ import annotations

import ctypes
import sys

import pytest

from hisho.engine.lib.process import give_back_heap
from hisho.engine.measure.probe import memory_now

MIB = 1 << 20


def _rss() -> int:
    return memory_now()["rss"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_checkpoint_sized_blocks_leave_the_process() -> None:
    # A freed 8 MiB mapping raises glibc's mmap threshold past it, as a checkpoint dropped in a long chat does:
    # the next blocks of that size come from the heap, and freeing them keeps their pages resident.
    big = (ctypes.c_uint8 * (8 * MIB))()
    del big
    blocks = [(ctypes.c_uint8 * (4 * MIB))() for _ in range(40)]  # zeroed: every page touched
    last = blocks.pop()  # a live block above the others: their space is not a free heap top
    held = _rss()
    blocks.clear()
    kept = _rss()
    assert give_back_heap()
    after = _rss()
    assert held - kept < 40 * MIB, "glibc gave the blocks back by itself: nothing left to test here"
    assert kept - after > 100 * MIB, (held, kept, after)
    del last


def test_a_summary_job_lets_go_of_the_chat_contexts_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job context takes the chat context's cells; the chat's sequences are dropped with it, and so are
    their checkpoints (a long prompt's reading keeps one per mark), their pages given back."""
    from dataclasses import replace

    from hisho.bench.shapes import MEMORY_TYPES
    from hisho.core.engine.protocol import LoadParams, Sampling
    from hisho.engine.decode.reply import generate
    from hisho.engine.model import runtime as runtime_mod
    from tests.fixtures.gguf_shapes import true_model

    calls: list[int] = []
    monkeypatch.setattr(runtime_mod, "give_back_heap", lambda: calls.append(1) or True)
    rt = runtime_mod.Runtime.load(LoadParams(model_path=str(true_model(MEMORY_TYPES["swa"][0], "Q8_0")),
                                             n_ctx=2048, n_seq_max=2, n_threads=1, n_ubatch=512))
    try:
        prompt = [1000 + (i * 7919) % 30000 for i in range(900)]
        list(generate(rt, 0, prompt, replace(Sampling(temperature=0.0), max_tokens=1), lambda: False))
        chat = rt.keeper
        held = len(chat.checkpoints.get(0, []))
        assert held >= 7  # the marks at 128 ... 896 and the prompt's end
        with rt.job_context(2, 512) as job:
            assert not chat.checkpoints and not job.keeper.checkpoints and calls == [1]
        assert calls == [1, 1]  # the job's own, on the way back
    finally:
        rt.close()
