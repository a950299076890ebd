"""The weights the engine reads into memory arrive on transparent huge pages: at llama.cpp's first load-progress
report the engine advises the extents of large mappings nothing has touched yet, and only those (its resident
size does not grow, a block already in use keeps its pages)."""

from __future__ import annotations

import ctypes
import mmap
import os
import re
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import detect
from hisho.engine.lib import hugepages
from tests.fixtures.gguf_shapes import true_model

MIB = 1 << 20


def _thp_mode() -> str:
    try:
        m = re.search(r"\[(\w+)\]", Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text())
    except OSError:
        return ""
    return m.group(1) if m else ""


def _kib(field: str, pid: str = "self") -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


needs_thp = pytest.mark.skipif(_thp_mode() not in ("madvise", "always"), reason="transparent huge pages are off")


GUARD = 2 * MIB                 # keeps the block where the kernel aligns a large mapping: on a 2 MiB boundary
PROT_NONE = 0


class Block:
    """A private anonymous mapping, as malloc makes for a large buffer (not numpy's: numpy advises huge pages
    for its own large arrays). Fenced by an inaccessible extent on each side: the kernel merges adjacent
    mappings of the same kind into one, and two blocks made one after the other would otherwise be a single
    region in /proc/self/maps (one test's large and small block advised as one)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.mm = mmap.mmap(-1, size + 2 * GUARD, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        for fence in (base, base + GUARD + size):
            assert libc.mprotect(fence, GUARD, PROT_NONE) == 0, os.strerror(ctypes.get_errno())
        self.addr = base + GUARD

    def write(self, start: int, end: int) -> None:
        for off in range(start, end, 4096):
            self.mm[GUARD + off] = 1

    def runs(self, *, resident: bool) -> list[tuple[int, int]]:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
        try:
            return hugepages.extent_runs(self.addr, self.addr + self.size, fd, resident=resident)
        finally:
            os.close(fd)


def test_extents_are_told_apart_by_their_pages() -> None:
    """A block written in its first half only: whole extents there are resident, the second half's are empty,
    and the extent that straddles the middle (or holds a single touched page) is neither."""
    block = Block(32 * MIB)
    middle = block.addr + 16 * MIB + 4096 * 100   # inside an extent, whatever the block's alignment
    block.write(0, middle - block.addr)
    block.write(block.size - 1, block.size)       # one page in the last extent
    full, empty = block.runs(resident=True), block.runs(resident=False)
    assert full and empty
    assert all(a + n <= middle for a, n in full) and all(a >= middle for a, _n in empty)
    assert all(a + n <= block.addr + block.size - hugepages.HUGE for a, n in empty)
    assert sum(n for _a, n in full) >= 16 * MIB - 2 * hugepages.HUGE
    assert sum(n for _a, n in empty) >= 16 * MIB - 4 * hugepages.HUGE


@needs_thp
def test_only_untouched_extents_are_advised() -> None:
    size = 64 * MIB
    used = Block(size)
    used.write(0, size)                           # in use: keeps its pages
    fresh = Block(size)                           # nothing written yet
    rss = _kib("Rss")
    advised = hugepages.advise_untouched()
    assert advised >= size - 2 * hugepages.HUGE
    assert _kib("Rss") - rss < 1024               # advice alone faults nothing in
    huge = _kib("AnonHugePages")
    fresh.write(0, size)                          # the load's writes
    assert _kib("AnonHugePages") - huge >= (size - 2 * hugepages.HUGE) // 1024


def test_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = Block(64 * MIB)
    monkeypatch.setenv("HISHO_HUGE_PAGES", "0")
    assert hugepages.advise_untouched() == 0
    assert fresh.runs(resident=False)


@needs_thp
@pytest.mark.timeout(900)
def test_a_read_models_weights_are_on_huge_pages() -> None:
    """The 1B Llama shape (Q4_0) is read, not mapped, where llama.cpp repacks it (AVX2): its ~700 MiB of weights
    sit on 2 MiB pages after the load."""
    if "avx2" not in detect().cpu:
        pytest.skip("no repack on this CPU: the engine maps the file and the page cache holds the weights")
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(true_model("llama-3.2-1b", "Q4_0")), n_ctx=1024))
        assert client.tokenize("hello")
        assert client.pid is not None
        assert _kib("AnonHugePages", str(client.pid)) >= 400 * 1024


KV_LINE = "llama_kv_cache:        CPU KV buffer size =    64.00 MiB\n"   # as llama-kv-cache.cpp logs it


@needs_thp
def test_the_kv_buffer_llama_cpp_announces_is_advised_and_nothing_smaller() -> None:
    """llama.cpp logs the KV cache's size between allocating and clearing it: a fresh mapping that large is
    advised, a smaller fresh one is left alone, and another log line advises nothing."""
    kv = Block(64 * MIB)
    small = Block(24 * MIB)
    assert hugepages.advise_kv_buffer("llama_context:        CPU compute buffer size =   300.00 MiB\n") == 0
    assert hugepages.advise_kv_buffer(KV_LINE) >= 64 * MIB - 2 * hugepages.HUGE
    huge = _kib("AnonHugePages")
    small.write(0, small.size)
    assert _kib("AnonHugePages") - huge < 4096          # not advised: small pages (or at most a stray extent)
    kv.write(0, kv.size)                                 # llama.cpp's clear
    assert _kib("AnonHugePages") - huge >= (64 * MIB - 2 * hugepages.HUGE) // 1024


@needs_thp
@pytest.mark.timeout(900)
def test_the_engines_kv_cache_is_on_huge_pages() -> None:
    """A larger context's KV cache adds its size in huge pages (1B shape: 32 KiB of f16 KV per cell, so 7,168
    more cells are 224 MiB): the cache is cleared on 2 MiB pages, where a decode step reads a V row per page
    of the transposed cache without flash attention."""
    model = str(true_model("llama-3.2-1b", "Q4_0"))
    huge = {}
    for n_ctx in (1024, 8192):
        with EngineClient() as client:
            client.load(LoadParams(model_path=model, n_ctx=n_ctx, type_k="f16", type_v="f16"))
            assert client.pid is not None
            huge[n_ctx] = _kib("AnonHugePages", str(client.pid))
    assert huge[8192] - huge[1024] >= 200 * 1024, huge
