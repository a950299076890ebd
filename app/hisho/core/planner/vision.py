"""What a model's vision projector costs in a plan (docs/planner.md "Vision"): its weights, a compute buffer for
encoding one image, and the tokens one image takes in the context, all from the projector's header
(``hisho.core.models.projector_facts``). The search holds the projector's bytes out of the budget before it
fits the model, so a plan that fits leaves room for the projector; the plan then says how many images its
context holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisho.core.errors import ModelFileError
from hisho.core.units import MIB

log = logging.getLogger("hisho.planner")


@dataclass(frozen=True)
class VisionCost:
    projector: str        # the projector's file name
    projector_type: str
    weights: int          # bytes of its tensors (held in memory beside the model's)
    compute: int          # clip's compute buffer for one image (an estimate from the tower's shape)
    image_tokens: int     # tokens one image costs in the language model
    image_size: int
    patch_size: int

    @property
    def total(self) -> int:
        return self.weights + self.compute

    def images_fit(self, n_ctx: int) -> int:
        """Whole images the context holds (with nothing else in it)."""
        return n_ctx // self.image_tokens if self.image_tokens else 0

    def line(self, n_ctx: int) -> str:
        return (f"sees images: projector {self.projector} ({self.projector_type}), {self.weights / MIB:,.1f} MiB "
                f"weights + ~{self.compute / MIB:,.1f} MiB compute; an image ({self.image_size}×{self.image_size}, "
                f"{self.patch_size}-pixel patches) costs {self.image_tokens:,} tokens: {self.images_fit(n_ctx):,} "
                f"fit the {n_ctx:,}-token context")

    def to_dict(self, n_ctx: int) -> dict[str, Any]:
        return {"projector": self.projector, "projector_type": self.projector_type, "weights_bytes": self.weights,
                "compute_bytes": self.compute, "total_bytes": self.total, "image_tokens": self.image_tokens,
                "image_size": self.image_size, "patch_size": self.patch_size,
                "images_fit": self.images_fit(n_ctx), "text": self.line(n_ctx)}


def vision_cost(model_path: str | Path) -> VisionCost | None:
    """The cost of the projector beside ``model_path`` (``projector_for``); None for a text-only model or a hub
    header (no file on disk). An unreadable projector is logged and left out: the load will say why."""
    from hisho.core.models.projector import projector_for
    from hisho.core.models.projector_facts import read_projector_facts

    path = Path(model_path)
    if not path.is_file():
        return None
    found = projector_for(path)
    if found is None:
        return None
    try:
        pf = read_projector_facts(found)
    except ModelFileError as exc:
        log.warning("projector %s not counted: %s", found.name, exc)
        return None
    return cost_of(pf, found.name)


def cost_of(pf: Any, name: str) -> VisionCost:
    """The ``VisionCost`` of projector facts ``pf`` (a ``ProjectorFacts``: a file's or a hub header's)."""
    return VisionCost(projector=name, projector_type=pf.projector_type, weights=pf.weights_bytes,
                      compute=pf.compute_bytes, image_tokens=pf.image_tokens, image_size=pf.image_size,
                      patch_size=pf.patch_size)


def less_vision(budget: Any, cost: VisionCost | None) -> Any:
    """``budget`` (a ``machine.Budget``) with the projector's bytes held out: from the GPU's share where the plan
    has a GPU (libmtmd puts the projector there), else from RAM."""
    import dataclasses

    if cost is None:
        return budget
    if budget.gpu and not budget.unified:
        return dataclasses.replace(budget, gpu=max(0, budget.gpu - cost.total))
    return dataclasses.replace(budget, ram=max(0, budget.ram - cost.total),
                               gpu=max(0, budget.gpu - cost.total) if budget.gpu else 0)
