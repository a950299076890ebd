"""The engine's wire protocol: typed parameter records shared by the client (core) and the engine process.

Transport: one JSON object per line over the child's stdin (requests) and a private copy of its stdout (events).
See docs/engine-protocol.md for the full contract. Nothing here imports llama_cpp.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

PROTOCOL_VERSION = 1

# Request ops. Streaming ops answer with any number of "token" events and then one "done" event; the others
# answer with exactly one "result". Any op may instead end with one "error" event.
STREAMING_OPS = frozenset({"generate", "batch_generate", "state_save"})
OPS = frozenset({
    "hello", "load", "unload", "generate", "tokenize", "detokenize", "cancel", "shutdown",
    "seq_rm", "state_save", "state_load", "abort",
    "batch_generate",
    "kv_info", "prefill", "kv_flush",
})

# Error kinds an "error" event may carry.
ERR_BAD_REQUEST = "bad_request"      # malformed request, unknown op: a bug in the caller
ERR_MODEL_LOAD = "model_load"        # the model file could not be loaded: the user's to fix
ERR_NOT_LOADED = "not_loaded"        # generate/tokenize before load
ERR_CONTEXT_FULL = "context_full"    # prompt (+ reply) does not fit n_ctx
ERR_STATE = "state"                  # a KV state could not be saved or restored
ERR_INTERNAL = "internal"            # anything else (a bug); the message says what


@dataclass(frozen=True)
class LoadParams:
    """Everything that decides how a model is loaded. The client keeps the last one to restart with."""

    model_path: str
    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0               # 0: physical cores
    n_threads_batch: int = 0         # 0: same as n_threads
    n_gpu_layers: int = 0
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    n_seq_max: int = 1
    kv_unified: bool = True
    swa_full: bool = False
    seed: int = 0
    use_mmap: bool | None = None     # None: map the file unless llama.cpp repacks weights (planner/repack.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadParams:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Sampling:
    """Sampling for one reply. temperature 0 is greedy (and deterministic)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    seed: int = -1                   # -1: random
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False         # benchmarks only: always produce max_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sampling:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (what a KV cache can keep)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("protocol message is not a JSON object")
    return value
