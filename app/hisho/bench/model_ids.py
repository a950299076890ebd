"""A bench's ``--model`` as a generated file: a true shape (``shape:llama-3.2-1b:Q4_0``, ``bench/shapes.py``) or a
vision pair (``shape:llava-tiny``, ``bench/projector.py``: the model, its projector beside it). Apart from both
so that neither imports the other."""

from __future__ import annotations

from pathlib import Path

from hisho.bench import projector, shapes


def resolve(name: str | None) -> Path | None:
    """The generated file ``name`` names, written on first use; None: not a generated model's id (a store name
    or a path)."""
    if not name:
        return None
    parts = name.removeprefix("shape:").split(":")
    if len(parts) == 1:
        pair = projector.pair(parts[0])
        if pair is not None:
            return pair[0]
    return shapes.resolve(name)
