"""Hypothesis property tests of the planner's arithmetic: more memory never gives a worse plan; a longer
context never needs less memory."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hisho.core.planner import plan
from hisho.core.planner.memory import Config, estimate, kv_bytes
from hisho.core.planner.quality import score
from tests.core.test_planner import budget, smollm

FACTS, CALIB = smollm()
QUANTS = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q4_0", "Q3_K_M", "Q2_K")
BPW = {"Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.89, "IQ4_XS": 4.46, "Q4_0": 4.55, "Q3_K_M": 3.91,
       "Q2_K": 3.35}
CANDS = [dataclasses.replace(FACTS, quant=q, source=f"smollm:{q}",
                             tensor_bytes={k: int(v * BPW[q] / 5.0) for k, v in FACTS.tensor_bytes.items()})
         for q in QUANTS]
layouts = st.sampled_from([(True, "f16", "f16"), (True, "q8_0", "q8_0"), (True, "q4_0", "q4_0"),
                           (False, "f16", "f16")])


def rank(p: object) -> tuple[float, int, int, int]:
    """Lower is better: what the search optimises (quality, then context, then GPU layers, then FA)."""
    from hisho.core.planner.search import Plan

    assert isinstance(p, Plan)
    if not p.fits:
        return (float("inf"), 0, 0, 0)
    c = p.config
    return (score(p.quant, c.type_k, c.type_v), -c.n_ctx, -c.n_gpu_layers, 0 if c.flash_attn else 1)


@settings(max_examples=40, deadline=None)
@given(ram=st.floats(0.05, 2.0), extra=st.floats(0.0, 2.0), min_ctx=st.sampled_from([512, 1024, 2048, 4096]),
       calibrated=st.booleans(), metric=st.sampled_from(["resident", "committed"]))
def test_more_memory_never_gives_a_worse_plan(ram: float, extra: float, min_ctx: int, calibrated: bool,
                                              metric: str) -> None:
    cal = (lambda f: CALIB) if calibrated else None
    small = plan(CANDS, budget(ram, metric=metric), min_ctx=min_ctx, target_ctx=8192, calibration=cal)
    large = plan(CANDS, budget(ram + extra, metric=metric), min_ctx=min_ctx, target_ctx=8192, calibration=cal)
    assert rank(large) <= rank(small)
    if small.fits:
        assert large.fits


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 16384), more=st.integers(0, 16384), layout=layouts, calibrated=st.booleans())
def test_longer_context_never_needs_less_memory(n: int, more: int, layout: tuple[bool, str, str],
                                                calibrated: bool) -> None:
    fa, tk, tv = layout
    calib = CALIB if calibrated else None
    a = estimate(FACTS, Config(n_ctx=n, type_k=tk, type_v=tv, flash_attn=fa), calib)
    b = estimate(FACTS, Config(n_ctx=n + more, type_k=tk, type_v=tv, flash_attn=fa), calib)
    assert b.kv >= a.kv
    assert b.resident >= a.resident
    assert b.committed_bound >= a.committed_bound


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 1 << 17), swa=st.integers(0, 4096), ubatch=st.sampled_from([64, 256, 512, 2048]))
def test_kv_monotone_with_sliding_window(n: int, swa: int, ubatch: int) -> None:
    facts = dataclasses.replace(FACTS, n_swa=swa, swa_layers=tuple(i % 6 < 5 for i in range(FACTS.n_layer)))
    a = kv_bytes(facts, Config(n_ctx=n, n_ubatch=ubatch))
    b = kv_bytes(facts, Config(n_ctx=n + 256, n_ubatch=ubatch))
    full = kv_bytes(facts, Config(n_ctx=n, n_ubatch=ubatch, swa_full=True))
    assert a <= b and a <= full
