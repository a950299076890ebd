"""What each architecture's layers hold, from its GGUF keys, as llama.cpp decides it: which layers slide over a
window, which keep a recurrent state instead of (or beside) a KV cache, and how large that state is. Used by the
header reader (``gguf_facts``) to fill ``ModelFacts``. No Qt, no llama_cpp.
"""

from __future__ import annotations

from typing import Any

# Sliding-window layer patterns llama.cpp hard-codes per architecture when the file has no pattern key:
# n means "every n-th layer is global, the others slide" (llama-model.cpp, set_swa_pattern).
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "llama4": 4, "exaone4": 4}

# Memory types (llama-arch.cpp llm_arch_is_recurrent / llm_arch_is_hybrid, llama-model.cpp create_memory):
# a recurrent architecture keeps one fixed-size state per sequence in every layer and no KV cache; a hybrid
# one has attention layers (a KV cache, sliding or not) and recurrent layers (a fixed state). Which layers are
# which, per architecture (each model's load_arch_hparams): "kv0" a layer is recurrent when its KV head count is
# 0; "kv0_ff0" recurrent when both its KV heads and its FFN length are 0 (attention needs KV heads and no FFN,
# an FFN-only layer is neither: Nemotron-H); "interval" every full_attention_interval-th layer attends, the
# others are recurrent (Qwen3-Next); "all" every layer is both (Falcon-H1).
RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_LAYERS = {"jamba": "kv0", "plamo2": "kv0", "granitehybrid": "kv0", "lfm2": "kv0", "lfm2moe": "kv0",
                 "nemotron_h": "kv0_ff0", "nemotron_h_moe": "kv0_ff0", "qwen3next": "interval",
                 "qwen35": "interval", "qwen35moe": "interval", "falcon-h1": "all"}
def memory_layers(arch: str, n_layer: int, n_head_kv: tuple[int, ...], n_ff: tuple[int, ...],
                   key: Any) -> tuple[str, tuple[bool, ...], tuple[bool, ...]] | None:
    """(memory type, attention layers, recurrent layers) of a recurrent or hybrid architecture, else None."""
    if arch in RECURRENT_ARCHITECTURES:
        return "recurrent", (False,) * n_layer, (True,) * n_layer
    rule = HYBRID_LAYERS.get(arch)
    if rule is None:
        return None
    if rule == "all":
        return "hybrid", (True,) * n_layer, (True,) * n_layer
    if rule == "interval":
        flags = key("attention.recurrent_layers", None)
        if isinstance(flags, list) and len(flags) >= n_layer:
            recurrent = tuple(bool(f) for f in flags[:n_layer])
        else:
            interval = int(key("full_attention_interval", 4) or 4)
            recurrent = tuple((il + 1) % interval != 0 for il in range(n_layer))
        return "hybrid", tuple(not r for r in recurrent), recurrent
    if rule == "kv0_ff0":
        recurrent = tuple(n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer))
        return "hybrid", tuple(n_head_kv[il] > 0 and n_ff[il] == 0 for il in range(n_layer)), recurrent
    recurrent = tuple(h == 0 for h in n_head_kv)
    return "hybrid", tuple(not r for r in recurrent), recurrent


def recurrent_state(arch: str, n_embd: int, key: Any) -> tuple[int, int]:
    """(n_embd_r, n_embd_s): f32 values per sequence of one recurrent layer's two state tensors, as
    llama-hparams.cpp sizes them: RWKV's token shift and WKV state, LFM2's short-conv window, else Mamba's conv
    window (the first column is shifted out, so d_conv - 1 of them) and SSM state."""
    wkv = int(key("wkv.head_size", 0) or 0)
    if wkv:
        return int(key("token_shift_count", 2) or 2) * n_embd, n_embd * wkv
    l_cache = int(key("shortconv.l_cache", 0) or 0)
    if l_cache:
        return n_embd * (l_cache - 1), 0
    d_conv, d_inner = int(key("ssm.conv_kernel", 0) or 0), int(key("ssm.inner_size", 0) or 0)
    d_state, n_group = int(key("ssm.state_size", 0) or 0), int(key("ssm.group_count", 0) or 0)
    return max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def swa_layers(arch: str, n_swa: int, n_layer: int, pattern: Any) -> tuple[bool, ...]:
    if n_swa <= 0:
        return (False,) * n_layer
    if isinstance(pattern, list) and pattern:
        flags = [bool(v) for v in pattern]
        return tuple((flags * (n_layer // len(flags) + 1))[:n_layer])
    period = int(pattern) if isinstance(pattern, int) and pattern > 0 else SWA_PATTERNS.get(arch, 0)
    if period <= 0:
        # A window with no known pattern: llama.cpp then applies it to every layer.
        return (True,) * n_layer
    return tuple(il % period < period - 1 for il in range(n_layer))
