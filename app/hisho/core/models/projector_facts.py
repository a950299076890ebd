"""Header facts of a vision projector (an ``mmproj`` GGUF), and whether it fits a model (docs/images.md). No Qt.

Read from the projector's header (``clip.*`` keys and the tensor table; the weights are never read): its type
(``clip.projector_type``, or ``clip.vision.projector_type`` in mixed files), the tower's image and patch size,
width, blocks and heads, the width it projects to (the last ``mm.*`` matrix's output, else
``clip.vision.projection_dim``) and the bytes of its tensors. From those: the tokens one image costs in the
language model (``image_tokens``) and a compute-buffer estimate for encoding one image (``compute_bytes``).

A projector fits a model when it projects onto the model's embedding width and its type is one the engine runs
(libmtmd refuses a width mismatch at load; M-RoPE types are refused by the engine, docs/images.md).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hisho.core.errors import ModelFileError

# Types whose images are placed with M-RoPE positions: refused at load by the engine (docs/images.md).
MROPE_TYPES = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen2vl", "qwen25vl", "qwen3vl_merger", "glm4v"})
# Tokens per image = patches / POOL[type] (LLaVA-style types keep every patch; the class token is dropped).
POOL = {"ldp": 4, "ldpv2": 4, "gemma3": 16, "idefics3": 0, "lfm2": 0, "llama4": 4, "pixtral": 4}
MM_WEIGHT = re.compile(r"^mm\.(\d+)\.weight$")


@dataclass(frozen=True)
class ProjectorFacts:
    source: str
    projector_type: str
    image_size: int
    patch_size: int
    n_embd: int          # the tower's width
    n_layer: int
    n_head: int
    n_ff: int
    projection_dim: int  # the width it projects onto: the language model's embedding width
    scale_factor: int
    weights_bytes: int
    file_size: int

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2 if self.patch_size else 0

    @property
    def image_tokens(self) -> int:
        """Tokens one image at the tower's size costs in the language model."""
        pool = POOL.get(self.projector_type, 1)
        if pool == 0:  # pixel-shuffle projectors: the scale factor squared
            pool = max(1, self.scale_factor) ** 2
        return max(1, self.n_patches // pool)

    @property
    def compute_bytes(self) -> int:
        """clip.cpp's compute buffer for one image, estimated from the tower's shape: f32 activations of one
        block per position (the feed-forward's inner width twice, the tower's width three times; ggml's allocator
        reuses the rest) plus the image in f32. clip.cpp reserves it with flash attention, so no attention
        scores. Against its own report: 27.3 MiB estimated for LLaVA-1.5's tower (19.3 MiB reported), 0.06 MiB
        for the tiny test tower (0.03 MiB): on the safe side."""
        n_pos = self.n_patches + 1
        return n_pos * (2 * self.n_ff + 3 * self.n_embd) * 4 + 3 * self.image_size * self.image_size * 4

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["image_tokens"] = self.image_tokens
        d["compute_bytes"] = self.compute_bytes
        return d


def _value(fields: dict[str, Any], key: str, default: Any) -> Any:
    f = fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def facts_from_header(header: Any, *, source: str, file_size: int) -> ProjectorFacts:
    """``ProjectorFacts`` of a walked header (``gguf_header.Header``). Raises ModelFileError where it is not a
    vision projector."""
    fields = header.fields
    arch = str(_value(fields, "general.architecture", ""))
    ptype = str(_value(fields, "clip.projector_type", "") or _value(fields, "clip.vision.projector_type", ""))
    if arch != "clip" or not ptype:
        raise ModelFileError(f"{Path(source).name} is not a vision projector (no clip.projector_type)")
    if not _value(fields, "clip.has_vision_encoder", True):
        raise ModelFileError(f"{Path(source).name} has no vision encoder (an audio projector?)")
    width = 0
    mm = sorted((int(m.group(1)), t) for t in header.tensors if (m := MM_WEIGHT.match(t.name)))
    if mm and len(mm[-1][1].shape) >= 2:
        width = int(mm[-1][1].shape[1])
    width = width or int(_value(fields, "clip.vision.projection_dim", 0))
    return ProjectorFacts(
        source=source, projector_type=ptype,
        image_size=int(_value(fields, "clip.vision.image_size", 0)),
        patch_size=int(_value(fields, "clip.vision.patch_size", 0)),
        n_embd=int(_value(fields, "clip.vision.embedding_length", 0)),
        n_layer=int(_value(fields, "clip.vision.block_count", 0)),
        n_head=int(_value(fields, "clip.vision.attention.head_count", 0)),
        n_ff=int(_value(fields, "clip.vision.feed_forward_length", 0)),
        projection_dim=width,
        scale_factor=int(_value(fields, "clip.vision.projector.scale_factor", 0)),
        weights_bytes=sum(int(t.n_bytes) for t in header.tensors),
        file_size=file_size)


def read_projector_facts(path: str | Path) -> ProjectorFacts:
    """Facts of a local projector file. Raises ModelFileError with the reason."""
    from hisho.core.models import gguf_header

    p = Path(path)
    try:
        header = gguf_header.read(p)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read projector {p.name}: {exc}") from None
    return facts_from_header(header, source=str(p), file_size=p.stat().st_size)


def projector_from_ranges(fetch: Any, size: int, *, source: str) -> ProjectorFacts:
    """Facts of a projector that can only be read by ranges (a hub file): ``fetch(start, end)`` gives bytes."""
    from hisho.core.models import gguf_header

    want = min(1 << 20, size)
    while True:
        try:
            return facts_from_header(gguf_header.parse(fetch(0, want)), source=source, file_size=size)
        except gguf_header.HeaderError as exc:
            if want >= size or want >= (64 << 20):
                raise ModelFileError(f"cannot read projector {Path(source).name}: {exc}") from None
            want = min(size, want * 4)


def mismatch(proj: ProjectorFacts, n_embd: int, model_name: str = "the model") -> str:
    """Why ``proj`` cannot go with a model of embedding width ``n_embd``; "" when it fits."""
    name = Path(proj.source).name
    if proj.projector_type in MROPE_TYPES:
        return (f"{name} is a {proj.projector_type} projector, which places images with M-RoPE positions: "
                "Hisho does not run those yet")
    if proj.projection_dim and n_embd and proj.projection_dim != n_embd:
        return (f"{name} projects images onto {proj.projection_dim}-wide embeddings, but {model_name} is "
                f"{n_embd} wide: it belongs to another model")
    if not proj.image_size or not proj.patch_size:
        return f"{name} does not say its image and patch size"
    return ""
