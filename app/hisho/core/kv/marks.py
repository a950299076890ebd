"""Where a prompt's reading stops for an interval checkpoint: one rule for the engine (``PrefixKeeper.marks``) and
the planner (``kept_bytes``), so the count the plan reserves follows what the engine takes. No llama_cpp here.

Exactness asks that every reading of a prompt stop at the same absolute positions, a fresh prefill included (a
continuation from a checkpoint is then bit for bit that prefill): so the spacing of the marks is a fixed function
of the model and the load, never of a measured speed, and it is part of a window or recurrent model's KV
fingerprint (cells read in other slices round differently). Which of the marks are *kept* is the engine's cost
rule (``PrefixKeeper.interval_spacing``); that one may follow measured speeds, since keeping changes no number.

Choice (docs/kv-format.md "Decision: marks every 128 tokens"): every ``FINE_TOKENS`` on a load that reads prompts
on the CPU, every ``COARSE_TOKENS`` (a save's chunk) where layers are offloaded. On the CPU re-reading 128 tokens
costs seconds for a 1B model and ~0.3 s for Gemma-3-270M, a checkpoint (a 7-11 MiB window, a 55 MiB Mamba state)
milliseconds, and slices of 128 read about as fast as 512 (measured: +3-5 % on Gemma-3-270M, nothing above the
noise on a 1B); on a GPU the reading is tens of times faster and a state copied off the device per 128 tokens
would cost a share of it. Dense models take none (a cut is exact).
"""

from __future__ import annotations

FINE_TOKENS = 128
COARSE_TOKENS = 512  # = the chunk size of a save (core/kv/session.py DEFAULT_CHUNK_TOKENS): marks fall on chunk ends


def interval_tokens(memory: str, n_gpu_layers: int) -> int:
    """Tokens between two interval marks for a model of ``memory`` ("dense", "swa", "recurrent", "hybrid")
    loaded with ``n_gpu_layers`` offloaded; 0 for a dense model (no marks). Always divides ``COARSE_TOKENS``,
    so every chunk end of a save is a mark."""
    if memory == "dense":
        return 0
    return COARSE_TOKENS if n_gpu_layers > 0 else FINE_TOKENS
