"""How a configuration lays out its KV cache: the configuration itself, row sizes per KV type, streams and
sliding-window cells. The base of the planner's modules (memory.py and state.py both build on it)."""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.units import padded_cells

KV_BLOCK = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}


@dataclass(frozen=True)
class Config:
    """One way to load a model."""

    n_ctx: int
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    n_gpu_layers: int = 0
    n_batch: int = 512
    n_ubatch: int = 512
    n_seq_max: int = 1
    swa_full: bool = False
    kv_unified: bool = True  # False: one KV stream of n_ctx / n_seq_max cells per sequence (the API's slots)
    use_mmap: bool | None = None  # None: the engine's policy (map unless weights get repacked; repack.py)
    saves_kv: bool = False  # the load saves and restores KV chunk files (the window's profiles): a save arena

    def valid_for(self, facts: ModelFacts) -> str | None:
        """Why llama.cpp would refuse this configuration, or None."""
        if self.type_v != "f16" and not self.flash_attn:
            return "a quantized V cache needs flash attention"
        for kind, n in ((self.type_k, facts.key_length), (self.type_v, facts.value_length)):
            if n % KV_BLOCK[kind][0]:
                return f"{kind} needs head sizes divisible by {KV_BLOCK[kind][0]}"
        return None


def row_bytes(kind: str, n: int) -> int:
    block, size = KV_BLOCK[kind]
    return -(-n // block) * size


def stream_cells(cfg: Config) -> tuple[int, int]:
    """(streams, cells per stream) of the KV cache: one stream of n_ctx cells when unified, else one of
    n_ctx / n_seq_max cells per sequence (llama-context.cpp n_ctx_seq, padded to 256 each)."""
    if cfg.kv_unified or cfg.n_seq_max <= 1:
        return 1, padded_cells(cfg.n_ctx)
    return cfg.n_seq_max, padded_cells(max(1, padded_cells(cfg.n_ctx) // cfg.n_seq_max))


def swa_cells(facts: ModelFacts, cells: int, cfg: Config) -> int:
    """Cells per stream a sliding-window layer holds: the window (times the sequences sharing a unified stream)
    plus one ubatch, padded to 256, never more than the full stream (llama-kv-cache-iswa.cpp); all of them with
    ``swa_full``."""
    if cfg.swa_full:
        return cells
    shared = cfg.n_seq_max if cfg.kv_unified else 1
    return padded_cells(min(cells, facts.n_swa * shared + cfg.n_ubatch))
