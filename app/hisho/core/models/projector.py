"""Which vision projector goes with a model file (docs/images.md). No Qt.

A projector (an ``mmproj`` GGUF: the vision tower and the projection into the model's embeddings) is a file of
its own beside the model, named after it: ``<model stem>.mmproj.gguf`` or ``mmproj-<model stem>.gguf``. The
engine loads it with the model (``LoadParams.mmproj_path``) and the model then reads images.
"""

from __future__ import annotations

from pathlib import Path


def projector_for(model_path: str | Path) -> Path | None:
    """The projector file beside ``model_path``, or None (a text-only model)."""
    path = Path(model_path)
    stem = path.name.removesuffix(".gguf")
    for name in (f"{stem}.mmproj.gguf", f"mmproj-{stem}.gguf"):
        candidate = path.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def is_projector(path: str | Path) -> bool:
    """Whether a GGUF file is a projector by its name (one is never loaded as a model)."""
    name = Path(path).name.lower()
    return name.endswith(".mmproj.gguf") or name.startswith("mmproj")


def not_a_projector(path: str | Path) -> None:
    """Refuse a projector where a model is wanted (llama.cpp would fail on it with "unknown architecture")."""
    if is_projector(path):
        from hisho.core.errors import ModelFileError

        raise ModelFileError(f"{Path(path).name} is a vision projector (mmproj), not a model: put it beside its "
                             "model as <model name>.mmproj.gguf and load the model")
