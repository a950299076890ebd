"""The search: quant x n_ctx x type_k/type_v x flash attention x n_gpu_layers, best quality that fits.

Order of preference (lexicographic, so more memory can never give a worse plan: the feasible set only grows):
1. quality: lowest ``quality.score(quant, type_k, type_v)`` (KL ladder; dominated quants rank below the type
   that dominates them; q8_0 KV costs about what q8_0 weights cost);
2. context: the largest n_ctx up to ``target_ctx`` (never below ``min_ctx``; a plan under min_ctx does not fit);
3. more layers on the GPU; 4. flash attention on; 5. less memory.

Every configuration is priced by ``memory.estimate``; for each (quant, layout, n_gpu_layers) the largest
fitting context is found by bisection over multiples of 256 (memory never shrinks with context). The plan
explains itself: why not the next better quant, the context q8_0 KV would allow, what more memory would buy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hisho.core.machine import Budget
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner import attention, explain, quality
from hisho.core.planner.calibrate import LAYOUTS, cached
from hisho.core.planner.memory import CELL_PAD, Breakdown, Calibration, Config, estimate
from hisho.core.planner.state import state_size
from hisho.core.planner.vision import VisionCost
from hisho.core.units import GIB, MIB, padded_cells


@dataclass
class Plan:
    model: str
    quant: str
    config: Config
    fits: bool
    budget: Budget
    breakdown: Breakdown
    reason: str
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    facts: ModelFacts | None = None
    asked: Config | None = None          # the configuration before the load rules (``as_loaded``)
    cpu: frozenset[str] | None = None    # the CPU features it was priced for (weight repacking)
    profile: str = ""                    # the front end it is for (profiles.SHAPES), where one was named
    attention: dict[str, Any] | None = None  # flash attention measured on this machine (attention.py), if kept
    vision: VisionCost | None = None     # the model's projector, held out of the budget (vision.py)

    @property
    def requested(self) -> Config:
        """What a load asks for (flash attention and ubatch as the settings say); ``config`` is what it runs.
        Another context or KV type is priced from this, through ``as_loaded``, never from ``config``."""
        return self.asked or self.config

    @property
    def need(self) -> int:
        return self.breakdown.committed if self.budget.metric == "committed" else self.breakdown.resident

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        b = self.breakdown
        return {
            "model": self.model, "quant": self.quant, "n_ctx": c.n_ctx, "type_k": c.type_k, "type_v": c.type_v,
            "flash_attn": c.flash_attn, "n_gpu_layers": c.n_gpu_layers, "n_batch": c.n_batch,
            "n_ubatch": c.n_ubatch, "fits": self.fits, "budget_bytes": self.budget.ram,
            "gpu_budget_bytes": self.budget.gpu, "unified_memory": self.budget.unified,
            "headroom_bytes": self.budget.headroom, "fit_metric": self.budget.metric,
            "breakdown": {"weights": b.weights, "kv": b.kv, "compute": b.compute, "output": b.output,
                          "runtime": b.runtime, "kept": b.kept, "total": b.total},
            "committed": b.committed, "resident": b.resident, "gpu_bytes": b.gpu, "estimate": b.estimate,
            "repacked_bytes": b.repacked, "mmap": b.mmap, "memory_type": self.facts.memory if self.facts else "",
            "saved_state": state_size(self.facts, c.type_k, c.type_v).to_dict() if self.facts else {},
            "parts": [r.to_dict() for r in explain.rows(self)], "profile": self.profile,
            "notes": list(b.notes), "budget": self.budget.explain, "reason": self.reason,
            "alternatives": self.alternatives, "layer_split": self.layer_split(),
            "attention_measured": self.attention,
            "vision": self.vision.to_dict(c.n_ctx) if self.vision is not None else None,
        }

    def layer_split(self) -> dict[str, int]:
        """Layers on the GPU and in RAM, counted as llama.cpp does: the repeating layers and the output layer."""
        total = (self.facts.n_layer + 1) if self.facts else 0
        gpu = min(self.config.n_gpu_layers, total)
        return {"gpu": gpu, "cpu": total - gpu, "total": total}


@dataclass(frozen=True)
class Candidate:
    facts: ModelFacts
    calib: Calibration | None
    cpu: frozenset[str] | None = None  # this machine's CPU features (which weights llama.cpp repacks)


def fits(b: Breakdown, budget: Budget) -> bool:
    need = b.committed_bound if budget.metric == "committed" else b.resident
    if budget.unified:
        return need <= budget.ram and b.gpu <= budget.gpu
    # A discrete GPU holds its share itself; the rest must fit RAM.
    return need - b.gpu <= budget.ram and b.gpu <= budget.gpu


class Search:
    def __init__(self, budget: Budget, *, min_ctx: int = 4096, target_ctx: int | None = None,
                 n_batch: int = 512, n_ubatch: int = 512, n_seq_max: int = 1, saves_kv: bool = False,
                 kv_unified: bool = True) -> None:
        if min_ctx < 1:
            raise ValueError("min_ctx must be positive")
        self.budget = budget
        self.min_ctx = min_ctx
        self.target_ctx = max(target_ctx or min_ctx, min_ctx)
        self.base = Config(n_ctx=min_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=n_seq_max, saves_kv=saves_kv,
                           kv_unified=kv_unified)

    # ----- pricing --------------------------------------------------------------------------------------

    def _cfg(self, fa: bool, tk: str, tv: str, ngl: int, n_ctx: int) -> Config:
        b = self.base
        return Config(n_ctx=n_ctx, type_k=tk, type_v=tv, flash_attn=fa, n_gpu_layers=ngl, n_batch=b.n_batch,
                      n_ubatch=b.n_ubatch, n_seq_max=b.n_seq_max, saves_kv=b.saves_kv, kv_unified=b.kv_unified)

    def ctx_range(self, facts: ModelFacts, cap: int | None = None) -> tuple[int, int]:
        """(smallest acceptable, largest wanted) n_ctx for this model."""
        b = self.base
        # With one KV stream per sequence (serve's slots) each sequence gets n_ctx / n_seq_max: that is what the
        # trained context bounds.
        train = facts.context_length * (1 if b.kv_unified else max(1, b.n_seq_max)) or self.target_ctx
        hi = min(cap or self.target_ctx, train)
        lo = min(self.min_ctx, train)
        return lo, max(lo, hi)

    def max_ctx(self, cand: Candidate, fa: bool, tk: str, tv: str, ngl: int, cap: int | None = None) -> int:
        """Largest fitting n_ctx in the wanted range (multiples of 256, or exactly the top), 0 if none."""
        lo, hi = self.ctx_range(cand.facts, cap)

        def ok(n: int) -> bool:
            return fits(estimate(cand.facts, self._cfg(fa, tk, tv, ngl, n), cand.calib, cpu=cand.cpu), self.budget)

        if not ok(lo):
            return 0
        if ok(hi):
            return hi
        a, z = lo // CELL_PAD, hi // CELL_PAD  # lo fits; find the largest multiple of 256 below hi that fits
        while a < z:
            mid = (a + z + 1) // 2
            if ok(max(lo, mid * CELL_PAD)):
                a = mid
            else:
                z = mid - 1
        return max(lo, a * CELL_PAD)

    def gpu_options(self, facts: ModelFacts) -> range:
        if self.budget.gpu <= 0:
            return range(0, 1)
        return range(facts.n_layer + 1, -1, -1)

    # ----- the search -----------------------------------------------------------------------------------

    def best(self, candidates: Sequence[Candidate]) -> Plan:
        if not candidates:
            raise ValueError("no candidate model files")
        best_key: tuple[float, int, int, int] | None = None
        best: tuple[Candidate, Config] | None = None
        for cand in candidates:
            for fa, tk, tv in LAYOUTS:
                score = quality.score(cand.facts.quant, tk, tv)
                if best_key is not None and score > best_key[0]:
                    continue  # cannot win on quality, and quality comes first
                for ngl in self.gpu_options(cand.facts):
                    cfg0 = self._cfg(fa, tk, tv, ngl, self.min_ctx)
                    if cfg0.valid_for(cand.facts):
                        continue
                    n = self.max_ctx(cand, fa, tk, tv, ngl)
                    if not n:
                        continue
                    key = (score, -n, -ngl, 0 if fa else 1)
                    if best_key is None or key < best_key:
                        best_key, best = key, (cand, self._cfg(fa, tk, tv, ngl, n))
        if best is None:
            return self._nothing_fits(candidates)
        cand, cfg = best
        return self._explain(cand, cfg, candidates)

    def _cheapest(self, cand: Candidate) -> tuple[Config, Breakdown]:
        lo, _ = self.ctx_range(cand.facts)
        options = []
        for fa, tk, tv in LAYOUTS:
            for ngl in self.gpu_options(cand.facts):
                cfg = self._cfg(fa, tk, tv, ngl, lo)
                if cfg.valid_for(cand.facts) is None:
                    b = estimate(cand.facts, cfg, cand.calib, cpu=cand.cpu)
                    options.append((_need(b, self.budget), cfg, b))
        if not options:
            cfg = self._cfg(True, "f16", "f16", 0, lo)
            return cfg, estimate(cand.facts, cfg, cand.calib, cpu=cand.cpu)
        _, cfg, b = min(options, key=lambda o: o[0])
        return cfg, b

    def _nothing_fits(self, candidates: Sequence[Candidate]) -> Plan:
        priced = [(c, *self._cheapest(c)) for c in candidates]
        cand, cfg, b = min(priced, key=lambda p: _need(p[2], self.budget))
        need = _need(b, self.budget)
        reason = (f"nothing fits: the smallest option ({cand.facts.quant}, {cfg.n_ctx} tokens, "
                  f"{cfg.type_k} KV) needs {_gib(need)} of {self.budget.metric} memory; the budget is "
                  f"{_gib(self.budget.ram)}")
        return Plan(model=cand.facts.source, quant=cand.facts.quant, config=cfg, fits=False, budget=self.budget,
                    breakdown=b, reason=reason, alternatives=[{"what": "more memory", "needs_bytes": need}],
                    facts=cand.facts, cpu=cand.cpu)

    def _explain(self, cand: Candidate, cfg: Config, candidates: Sequence[Candidate]) -> Plan:
        b = estimate(cand.facts, cfg, cand.calib, cpu=cand.cpu)
        my_kl = quality.weights_kl(cand.facts.quant)
        better = sorted((c for c in candidates if quality.weights_kl(c.facts.quant) < my_kl),
                        key=lambda c: quality.weights_kl(c.facts.quant), reverse=True)
        parts = [f"{cand.facts.quant} weights, {cfg.type_k} KV, {cfg.n_ctx} tokens: best quality that fits "
                 f"{_gib(self.budget.ram)} ({self.budget.metric} {_gib(_need(b, self.budget))})"]
        alternatives: list[dict[str, Any]] = []
        if better:
            nxt = better[0]
            ncfg, nb = self._cheapest(nxt)
            parts.append(f"the next better quant {nxt.facts.quant} needs {_gib(_need(nb, self.budget))} even at "
                         f"{ncfg.n_ctx} tokens with {ncfg.type_k} KV")
            alternatives.append({"what": "next better quant", "quant": nxt.facts.quant, "model": nxt.facts.source,
                                 "n_ctx": ncfg.n_ctx, "type_k": ncfg.type_k, "needs_bytes": _need(nb, self.budget)})
        elif len(candidates) == 1:
            parts.append("only one file to choose from")
        _fa, lo = cfg.flash_attn, self.ctx_range(cand.facts)[0]
        if cfg.type_k != "f16":
            parts.append(f"f16 KV would not reach {lo} tokens")
        top = self.ctx_range(cand.facts, cap=1 << 30)[1]  # the trained context, for every sequence
        for tk in ("q8_0", "f16"):
            n = self.max_ctx(cand, True, tk, tk, cfg.n_gpu_layers, cap=top)
            alternatives.append({"what": f"max context with {tk} KV", "type_k": tk, "type_v": tk, "n_ctx": n})
        full = estimate(cand.facts, self._cfg(cfg.flash_attn, cfg.type_k, cfg.type_v, cfg.n_gpu_layers, top),
                        cand.calib, cpu=cand.cpu)
        if cfg.n_ctx < top:
            alternatives.append({"what": f"the full trained context ({top} tokens)",
                                 "needs_bytes": _need(full, self.budget)})
        return Plan(model=cand.facts.source, quant=cand.facts.quant, config=cfg, fits=True, budget=self.budget,
                    breakdown=b, reason="; ".join(parts), alternatives=alternatives, facts=cand.facts, cpu=cand.cpu)


def _need(b: Breakdown, budget: Budget) -> int:
    return b.committed_bound if budget.metric == "committed" else b.resident


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def plan(candidates: Sequence[ModelFacts], budget: Budget, *, min_ctx: int = 4096, target_ctx: int | None = None,
         calibration: Callable[[ModelFacts], Calibration | None] | None = None,
         cpu: frozenset[str] | None = None, **kw: Any) -> Plan:
    """Best plan for ``candidates`` (e.g. the quants of one model) within ``budget``."""
    cands = [Candidate(f, calibration(f) if calibration else None, cpu) for f in candidates]
    return Search(budget, min_ctx=min_ctx, target_ctx=target_ctx, **kw).best(cands)


def price(facts: ModelFacts, cfg: Config, budget: Budget, calib: Calibration | None = None, *,
          cpu: frozenset[str] | None = None) -> Plan:
    """The plan for one fixed configuration (the panel's slider, a user override): does it fit, and why."""
    b = estimate(facts, cfg, calib, cpu=cpu)
    ok = fits(b, budget)
    verdict = "fits" if ok else "does NOT fit"
    reason = (f"{facts.quant}, {cfg.type_k} KV, {cfg.n_ctx} tokens {verdict}: {budget.metric} "
              f"{_gib(_need(b, budget))} of {_gib(budget.ram)}")
    return Plan(model=facts.source, quant=facts.quant, config=cfg, fits=ok, budget=budget, breakdown=b,
                reason=reason, facts=facts, cpu=cpu)


def as_loaded(facts: ModelFacts, cfg: Config, budget: Budget, calib: Calibration | None = None, *,
              cpu: frozenset[str] | None = None) -> Plan:
    """The plan of ``cfg`` as a load runs it: priced with this CPU's repacking and mmap rule, then flash
    attention's rule (``attention_choice``). The one way a fixed configuration is priced: by the load
    (``gate.apply_plan``), the planner page's slider and grid, whatever the file's source (hub header, file)."""
    return attention_choice(price(facts, cfg, budget, calib, cpu=cpu), calib, cpu=cpu)


# Flash attention goes off (CPU, f16 KV) only while the attention scores of one ubatch over the whole cache
# (f32, cells x n_ubatch x n_head) stay under this: they are what grows the compute buffer without it (plus
# their f16 copy). Where a 512-token ubatch's scores would not fit, a smaller ubatch is taken (FA_OFF_UBATCHES):
# prefill and decode stay faster without flash attention with 128-token ubatches too (docs/flash-attention.md).
# Decided from the header and the load parameters only, never from the calibration, so the choice (part of the
# KV fingerprint) does not change when a model gets calibrated. 32 heads (1B/8B Llama): 512-token ubatches up
# to 4.6K tokens, 256 to 9K, 128 to 18K, 64 to 36K; 24 heads (3B): 128 up to 24K.
FA_OFF_MAX_SCORES = 320 * MIB
FA_OFF_UBATCHES = (512, 256, 128, 64)


def attention_off_ubatch(facts: ModelFacts, cfg: Config) -> int:
    """The ubatch size to run with flash attention off, or 0 to keep it on: it is on, the KV cache is
    unquantized, nothing runs on a GPU (the GPU backends' flash attention has no per-row slow path), and the
    scores of the largest of ``FA_OFF_UBATCHES`` not above ``cfg.n_ubatch`` stay under the cap."""
    if not cfg.flash_attn or cfg.type_k != "f16" or cfg.type_v != "f16" or cfg.n_gpu_layers > 0:
        return 0
    per_row = padded_cells(cfg.n_ctx) * max(facts.n_head or (1,)) * 4
    return next((ub for ub in FA_OFF_UBATCHES if ub <= cfg.n_ubatch and per_row * ub <= FA_OFF_MAX_SCORES), 0)


def attention_choice(p: Plan, calib: Calibration | None, *, cpu: frozenset[str] | None = None) -> Plan:
    """``p`` with flash attention off (and the ubatch ``attention_off_ubatch`` picks) where that pays and the
    load still fits, else ``p`` itself. The one rule for the load (``gate.apply_plan``) and for what
    ``hisho plan`` and the planner panel say. ``calib`` prices it where it was taken at that ubatch size;
    another size prices with its own cached calibration, or the formulas (the plan then says "estimate").
    Where this machine measured the model at this context and these ubatches (``attention.recall``), the
    measurement weighed for the load's kind (``attention.workload``) chooses between off and on instead."""
    if not p.fits or p.facts is None:
        return p
    ub = attention_off_ubatch(p.facts, p.config)
    cfg = p.config
    if cfg.flash_attn and cfg.n_gpu_layers == 0 and (cfg.type_k, cfg.type_v) != ("f16", "f16"):
        # ggml-cpu's flash attention has its tiled path for f16/f32 caches of one type only: any other is read
        # row by row, and each 512 tokens of a prompt cost more the deeper they sit (docs/flash-attention.md).
        kv = cfg.type_k if cfg.type_k == cfg.type_v else f"{cfg.type_k}/{cfg.type_v}"
        return replace(p, reason=f"{p.reason}; a {kv} KV cache keeps flash attention on, and on this CPU "
                                 "it reads long prompts several times slower than an f16 cache")
    if not ub:
        return p
    kind = attention.workload(cfg)
    measured = attention.recall(p.facts.source, cfg.n_ctx, (cfg.n_ubatch, ub),
                                seqs=attention.sequences(cfg.n_seq_max, cfg.kv_unified))
    if measured is not None and measured.choose(kind):
        return replace(p, attention=measured.to_dict(), reason=f"{p.reason}; {measured.summary(kind)}")
    if calib is None or calib.n_ubatch != ub:
        calib = cached(p.facts, ub)
    off = price(p.facts, replace(p.config, flash_attn=False, n_ubatch=ub), p.budget, calib, cpu=cpu)
    if not off.fits:
        return p
    # The reason names what the plan needs: say the figure of the configuration chosen, not the one before.
    before = f"({p.budget.metric} {_gib(_need(p.breakdown, p.budget))})"
    after = f"({p.budget.metric} {_gib(_need(off.breakdown, p.budget))})"
    batch = "" if ub == p.config.n_ubatch else f", {ub}-token ubatches"
    why = (f"({measured.summary(kind)})" if measured is not None
           else "(prompts and replies at long context run faster without it on this CPU)")
    return replace(p, config=off.config, breakdown=off.breakdown, asked=p.requested,
                   attention=measured.to_dict() if measured is not None else None,
                   reason=f"{p.reason.replace(before, after, 1)}; flash attention off{batch} {why}")
