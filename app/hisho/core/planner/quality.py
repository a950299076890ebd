"""How much quality a quantization costs: the KL-divergence ladder (llama.cpp's perplexity
scoreboard, Llama-3-8B, KL divergence against F16). Lower is better. The planner maximises quality, i.e.
minimises ``weights_kl(quant) + kv_kl(type_k, type_v)``.

Dominated types (Q4_0, Q4_1, Q5_0, Q5_1: a K or IQ type of the same size is better) get the KL of the next worse
rung, so the search never picks one when a better file of the same size is among the candidates.
"""

from __future__ import annotations

# KL divergence vs F16. Where the scoreboard gives a range, the upper end (be pessimistic).
WEIGHTS_KL: dict[str, float] = {
    "F32": 0.0, "F16": 0.0, "BF16": 0.0,
    "Q8_0": 0.0014,
    "Q6_K": 0.0055,
    "Q5_K_M": 0.011, "Q5_K_S": 0.014,
    "Q4_K_M": 0.031, "Q4_K_S": 0.034, "IQ4_NL": 0.035, "IQ4_XS": 0.036,
    "Q3_K_L": 0.070, "Q3_K_M": 0.084, "Q3_K_S": 0.12, "IQ3_M": 0.10, "IQ3_S": 0.12, "IQ3_XS": 0.15,
    "IQ3_XXS": 0.18,
    "Q2_K": 0.45, "Q2_K_S": 0.5, "IQ2_M": 0.4, "IQ2_S": 0.5, "IQ2_XS": 0.6, "IQ2_XXS": 0.8, "IQ1_M": 1.2,
    "IQ1_S": 1.5,
}

# Legacy types: no better than the K/IQ type below them of the same size (dominated).
DOMINATED = {"Q5_1": "Q5_K_S", "Q5_0": "Q5_K_S", "Q4_1": "IQ4_XS", "Q4_0": "IQ4_XS"}

# q8_0 KV costs about as little as q8_0 weights; q4_0 KV about as much as 4-bit legacy weights.
KV_KL: dict[str, float] = {"f16": 0.0, "q8_0": 0.0014, "q4_0": 0.045}

UNKNOWN_KL = 1.0  # a label we cannot place: rank it below everything we know


def weights_kl(quant: str) -> float:
    q = quant.upper()
    if q in WEIGHTS_KL:
        return WEIGHTS_KL[q]
    if q in DOMINATED:
        # Slightly worse than the type that dominates it, so ties go to the better file.
        return WEIGHTS_KL[DOMINATED[q]] * 1.05
    return UNKNOWN_KL


def kv_kl(type_k: str, type_v: str) -> float:
    # K and V each hold half the cache; their errors add.
    return (KV_KL.get(type_k, UNKNOWN_KL) + KV_KL.get(type_v, UNKNOWN_KL)) / 2


def score(quant: str, type_k: str, type_v: str) -> float:
    """Quality loss of a configuration (lower is better)."""
    return weights_kl(quant) + kv_kl(type_k, type_v)


def is_dominated(quant: str) -> bool:
    return quant.upper() in DOMINATED
