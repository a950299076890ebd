"""Units and sizes: the one home of byte multiples, their labels, and llama.cpp's KV cell padding.

Sizes are powers of 1024 everywhere in Hisho and are labelled as such (KiB, MiB, GiB): llama.cpp's own log
prints MiB, and a "MB" label on a 2**20 multiple would be off by 5 %.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3

CELL_PAD = 256  # llama.cpp pads a context's KV cells (and each job-context stream) to a multiple of this


def padded_cells(n: int, pad: int = CELL_PAD) -> int:
    """``n`` rounded up to llama.cpp's cell padding (at least one pad)."""
    return -(-max(1, int(n)) // pad) * pad


def format_bytes(n: float) -> str:
    """A size for people: "1.5 GiB", "12 MiB", "640 KiB" (one decimal at GiB, none below)."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.0f} MiB"
    return f"{max(n, 0) / KIB:.0f} KiB"


def wait_text(seconds: float) -> str:
    """A time a person waited, in the unit they think in: "840 ms" and "2,340 ms" under 10 s (first-token times
    are compared in milliseconds), "72.5 s" under 90 s, "1 min 13 s" past that (never "72,504 ms")."""
    if seconds < 10:
        return f"{seconds * 1000:,.0f} ms"
    if seconds < 90:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
