"""Put the weights the engine reads into memory on transparent huge pages (Linux).

llama.cpp's CPU buffers (the weights the engine reads or repacks instead of mapping) come from malloc, and
where transparent huge pages are ``madvise`` (the Debian and Ubuntu default) they are 4 KiB pages: a decode
step streams every weight once and pays a page walk every 4 KiB. On 2 MiB pages a 3B model decodes about 6 %
faster (docs/speed.md). Nothing computed changes, only the pages.

How: at llama.cpp's first load-progress report its weight buffers exist and nothing has been written into them
yet; ``advise_untouched`` gives ``MADV_HUGEPAGE`` to the 2 MiB extents of large anonymous mappings with no page
resident (found through ``/proc/self/pagemap``'s present bit), so the load's writes fault them in 2 MiB at a
time. Those buffers are filled whole, so the resident size is what it was and the planner's memory model
holds. Not chosen:
- ``glibc.malloc.hugetlb=1`` for the engine's process: every malloc'd block is advised, the compute buffer a
  decode touches only in part then faults in 2 MiB at a time, and the resident size moved by 1-5 MiB from run
  to run (over the planner's allowance on small models).
- ``MADV_COLLAPSE`` after the load: the same pages, but 17.5 s to move 2.9 GB of a 3B load.
The KV cache is created and cleared inside one llama.cpp call; between the two llama.cpp logs its size, and
the engine's log callback advises it then (``advise_kv_buffer``).

Where THP is ``never`` or the call is refused, nothing happens (one debug line). ``HISHO_HUGE_PAGES=0`` turns
it off.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys

import numpy as np

log = logging.getLogger("hisho.engine.lib.hugepages")

HUGE = 2 << 20
PAGE = 4096
MADV_HUGEPAGE = 14
MIN_REGION = 8 * HUGE        # smaller mappings are not worth a scan
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) rw-p [0-9a-f]+ 00:00 0\s*(\S*)\s*$")


def anonymous_regions(min_bytes: int = MIN_REGION) -> list[tuple[int, int]]:
    """(start, end) of this process's private, writable, anonymous mappings of at least ``min_bytes``."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            m = _MAPPING.match(line)
            if m is None or m.group(3) not in ("", "[heap]"):
                continue
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            if end - start >= max(min_bytes, MIN_REGION):
                out.append((start, end))
    return out


def extent_runs(start: int, end: int, pagemap: int, *, resident: bool) -> list[tuple[int, int]]:
    """Runs of whole 2 MiB extents inside [start, end) whose every page is present (``resident``) or none is,
    as (address, length)."""
    first = -(-start // HUGE) * HUGE
    last = end // HUGE * HUGE
    if last <= first:
        return []
    raw = os.pread(pagemap, (last - first) // PAGE * 8, first // PAGE * 8)
    present = ((np.frombuffer(raw, dtype="<u8") >> np.uint64(63)) & np.uint64(1)).astype(bool)
    per = present[: len(present) // 512 * 512].reshape(-1, 512)
    pick: list[bool] = np.asarray(per.all(axis=1) if resident else ~per.any(axis=1), dtype=bool).tolist()
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(pick):
        if not pick[i]:
            i += 1
            continue
        j = i
        while j < len(pick) and pick[j]:
            j += 1
        runs.append((first + i * HUGE, (j - i) * HUGE))
        i = j
    return runs


def advise_untouched(min_bytes: int = MIN_REGION, what: str = "new buffers") -> int:
    """``MADV_HUGEPAGE`` on every 2 MiB extent of the anonymous mappings of at least ``min_bytes`` that no page
    of has been touched yet; the bytes advised. Called once the model's buffers exist and before llama.cpp
    writes the weights into them (its first load-progress report): those pages then arrive as 2 MiB pages as
    the load fills them. Again for the KV cache (``advise_kv_buffer``)."""
    if not sys.platform.startswith("linux") or os.environ.get("HISHO_HUGE_PAGES") == "0":
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.madvise.restype = ctypes.c_int
    advised = 0
    try:
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError as e:
        log.debug("huge pages: no pagemap (%s)", e)
        return 0
    try:
        for start, end in anonymous_regions(min_bytes):
            for addr, length in extent_runs(start, end, pagemap, resident=False):
                if libc.madvise(addr, length, MADV_HUGEPAGE) != 0:
                    log.debug("huge pages: madvise refused: %s", os.strerror(ctypes.get_errno()))
                    return advised
                advised += length
    except OSError as e:
        log.debug("huge pages: %s", e)
    finally:
        os.close(pagemap)
    if advised:
        log.info("huge pages: %.0f MiB of %s advised onto 2 MiB pages", advised / (1 << 20), what)
    return advised


_KV_BUFFER = re.compile(r"KV buffer size\s*=\s*([0-9.]+) MiB")


def advise_kv_buffer(log_line: str) -> int:
    """The KV cache onto 2 MiB pages, from llama.cpp's log line that announces it: ``llama_kv_cache`` logs
    "<name> KV buffer size = N MiB" after allocating the buffer and before clearing it (llama-kv-cache.cpp), so
    the clear faults it in 2 MiB at a time and a step at depth reads the cache through fewer page walks. Only a
    mapping at least that large is advised (the buffer malloc just made); the clear writes every byte, so the
    resident size is what it was. Any other line: nothing (0)."""
    m = _KV_BUFFER.search(log_line)
    if m is None:
        return 0
    size = int(float(m.group(1)) * (1 << 20))
    if size < MIN_REGION:
        return 0
    return advise_untouched(size, "the KV cache")
