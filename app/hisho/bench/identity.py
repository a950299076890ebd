"""``hisho bench identity``: what the model identity (hisho.core.models.identity, issue 16) costs at load.

On a ~770 MB true-shape file (Llama-3.2-1B tensor table at Q4_0, hisho.bench.shapes; written once and cached),
each repetition measures: the first hash with the file out of the page cache (``cold_s``, a model just
downloaded or after a reboot), the hash with the file in the page cache (``page_cache_s``, right after
llama.cpp's own load read it), and the lookup a later load pays while the file is unchanged
(``cached_lookup_s``: one stat and the cache file). ``old_head_tail_s`` is what the former head-and-tail
fingerprint cost (it missed mid-file changes). Medians over ``--repeat``; the runs are in ``runs``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench.shapes import model_file
from hisho.core.models import identity as model_identity

SHAPE, QUANT = "llama-3.2-1b", "Q4_0"


def _drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _head_tail(path: Path, size: int) -> None:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        h.update(fh.read(8 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read())


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.model) if getattr(args, "model", None) else model_file(SHAPE, QUANT)
    size = path.stat().st_size
    runs = []
    with tempfile.TemporaryDirectory(prefix="hisho-identity-") as tmp:
        cache = Path(tmp) / model_identity.CACHE_NAME
        for _ in range(max(1, args.repeat)):
            cache.unlink(missing_ok=True)
            _drop_page_cache(path)
            cold = _timed(lambda: model_identity.identity(path, cache))
            cache.unlink(missing_ok=True)
            warm = _timed(lambda: model_identity.identity(path, cache))
            hit = _timed(lambda: model_identity.identity(path, cache))
            old = _timed(lambda: _head_tail(path, size))
            runs.append({"cold_s": round(cold, 3), "page_cache_s": round(warm, 3), "cached_lookup_s": round(hit, 5),
                         "old_head_tail_s": round(old, 4)})
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {"bench": "identity", "file": path.name, "file_bytes": size, **median,
            "gb_per_s_page_cache": round(size / median["page_cache_s"] / 1e9, 2) if median["page_cache_s"] else None,
            "runs": runs}
