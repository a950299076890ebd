"""``hisho bench plan --profiles``: each front end's plan against the peak of its own load.

A plan is for a profile (``planner/profiles.py``): the window keeps two sequences and saves KV, ``serve --parallel
N`` has N streams and saves, ``generate`` and ``summarize`` load one sequence and save nothing (``summarize`` then
swaps in a job context of a few streams for its batches). For each model and profile this bench takes two
figures and one measurement:

- ``cli``: what ``hisho plan --profile P`` says (``planner.make_plan``, the search, at the profile's context);
- ``load``: what the front end's own load is judged by (``launch.planned_load`` with the profile's sequences,
  streams and saving: the plan ``gate.apply_plan`` prices);
- ``measured``: that load run for real in a fresh child (``python -m hisho.bench.plan_kept``, as ``--kept``
  does): the context filled by the probe's synthetic state and one real ubatch (a window or recurrent model: by
  one real reading with the interval checkpoints on, as a long prompt is read), nine 64-token steps with the
  engine's checkpoints (serve: in each of its sequences), then each sequence's last 512-token prompt up to
  the full context (the bare context's peak, beside the kept state) and a checkpoint there; for a profile that
  saves KV then a save of each whole sequence and a restore of the first; for ``summarize`` its job context
  (``Runtime.job_context``) filled the same way. Peak RSS growth (VmHWM).

Models: the true-shape Llama-3.2-1B Q4_0 and 3B Q4_K_M (``bench.shapes``) and the real Gemma-3-270M
(``bench.real_models``); ``--only`` picks some ("llama-3.2-1b", "gemma-3-270m:window", ...). The rule: within
±5 %, never more than 2 % under.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

from hisho.bench.plan_kept import ProbeFailed, pct_error, run_kept_probe

log = logging.getLogger("hisho.bench")

PROFILE_MODELS = ("llama-3.2-1b:Q4_0", "llama-3.2-3b:Q4_K_M", "gemma-3-270m")
PROFILE_RUNS = (("window", None), ("serve", 2), ("generate", None), ("summarize", None))
PROFILE_CTX = 4096  # per sequence: serve --parallel 2 loads two streams of it
TOLERANCE_PCT, UNDER_PCT = 5.0, 2.0


def model_path(name: str) -> Path:
    """The file of a PROFILE_MODELS name."""
    if name == "gemma-3-270m":
        from hisho.bench.real_models import gemma_270m

        return gemma_270m()
    from hisho.bench.shapes import model_file

    shape, _, quant = name.partition(":")
    return model_file(shape, quant)


def wanted(only: str | None) -> list[tuple[str, str, int | None]]:
    """(model, profile, parallel) triples; ``only``: "model[:quant][@profile],..." (a prefix of the model name)."""
    runs = [(m, p, n) for m in PROFILE_MODELS for p, n in PROFILE_RUNS]
    if not only:
        return runs
    keep = []
    for item in (w.strip() for w in only.split(",") if w.strip()):
        name, _, prof = item.partition("@")
        keep += [r for r in runs if r[0].startswith(name) and prof in ("", r[1]) and r not in keep]
    if not keep:
        raise SystemExit(f"hisho: error: --only {only!r} names no model/profile (models: {', '.join(PROFILE_MODELS)})")
    return keep


def profile_cells(only: str | None, n_ctx: int, kv: str, machine: Any) -> dict[str, Any]:
    """Every wanted cell, measured in a fresh child each."""
    cells: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for name, profile, parallel in wanted(only):
        try:
            cell = profile_cell(model_path(name), profile, parallel, n_ctx, kv, machine)
        except (ProbeFailed, FileNotFoundError) as e:
            log.warning("%s %s failed: %s", name, profile, e)
            failed.append({"model": name, "profile": profile, "error": str(e)})
            continue
        cell["model"] = name
        sys.stderr.write(json.dumps(cell) + "\n")
        sys.stderr.flush()
        cells.append(cell)
    out: dict[str, Any] = {"profiles": True, "n_ctx": n_ctx, "type_k": kv,
                           "rule": f"within ±{TOLERANCE_PCT:g} %, never more than {UNDER_PCT:g} % under"}
    if cells:
        errors = [c["resident_error_pct"] for c in cells]
        out.update({"cells_measured": len(cells), "worst_over_pct": max(0.0, *errors),
                    "worst_under_pct": max(0.0, *(-e for e in errors)),
                    "worst_cli_vs_load_pct": max(abs(c["cli_vs_load_pct"]) for c in cells),
                    "within_rule": all(-UNDER_PCT <= e <= TOLERANCE_PCT for e in errors)})
    out["cells"] = cells
    if failed:
        out["failed_cells"] = failed
    return out


def planned(path: Path, profile: str, parallel: int | None, n_ctx: int, kv: str, machine: Any) -> dict[str, Any]:
    """The two figures for one cell: ``hisho plan --profile``'s and the front end's load's, with its params."""
    from hisho.core import settings as settings_mod
    from hisho.core.planner import make_plan, profiles
    from hisho.core.planner.launch import planned_load

    load = profiles.shape(profile, parallel)
    total = n_ctx * (load.n_seq_max if not load.kv_unified else 1)  # serve: --n-ctx is per sequence
    s = settings_mod.Settings({"kv_type": kv, "n_ctx": total})
    # The search first: it runs the dry runs (both ubatch sizes) the load's plan only reads from the cache.
    cli = make_plan([str(path)], machine, machine.budget(), min_ctx=256, target_ctx=total,
                    n_batch=int(s["n_batch"]), n_ubatch=int(s["n_batch"]), profile=profile, parallel=parallel)
    params, plan = planned_load(path, n_ctx=total, n_seq_max=load.n_seq_max, settings=s, override=True,
                                kv_unified=load.kv_unified, saves_kv=load.saves_kv, machine=machine)
    assert plan is not None and plan.facts is not None
    return {"load": load, "total": total, "cli": cli, "plan": plan, "params": dataclasses.replace(
        params, n_threads=int(s["n_threads"]))}


def profile_cell(path: Path, profile: str, parallel: int | None, n_ctx: int, kv: str, machine: Any,
                 ) -> dict[str, Any]:
    from hisho.core.documents.plan import CHUNK_TARGET, MAX_PARALLEL, SUMMARY_TOKENS, seq_cells

    p = planned(path, profile, parallel, n_ctx, kv, machine)
    plan, params, facts = p["plan"], p["params"], p["plan"].facts
    caches = {"dense": 1, "swa": 2, "hybrid": 2 if any(facts.swa_layers) else 1, "recurrent": 0}[facts.memory]
    request: dict[str, Any] = {"params": params.to_dict(), "n_swa": facts.n_swa, "kv_caches": caches,
                               "save": p["load"].saves_kv,
                               "sequences": 1 if p["load"].kv_unified else p["load"].n_seq_max, "end_full": True,
                               # a window or recurrent model's context filled by one long reading, its interval
                               # checkpoints on: the most it keeps (a dense one keeps none; the fill is faster)
                               "read": facts.memory != "dense"}
    if profile == "summarize":
        # A map phase as documents.plan packs it: full chunks, each in its own stream, as many as fit.
        per_seq = min(seq_cells(CHUNK_TARGET + SUMMARY_TOKENS + 128), p["total"])
        request["job"] = [max(1, min(MAX_PARALLEL, p["total"] // per_seq)), per_seq]
    m = run_kept_probe(request)
    measured = int(m["peak_growth"])
    c, cli = plan.config, p["cli"]
    return {
        "profile": profile if parallel is None else f"{profile} --parallel {parallel}",
        "n_ctx": c.n_ctx, "n_seq_max": c.n_seq_max, "kv_unified": c.kv_unified, "saves_kv": c.saves_kv,
        "type_k": c.type_k, "flash_attn": c.flash_attn, "n_ubatch": c.n_ubatch, "memory": facts.memory,
        "mmap": m.get("mmap"), "job": request.get("job"),
        "cli_resident": cli.breakdown.resident, "load_resident": plan.breakdown.resident,
        "cli_vs_load_pct": pct_error(cli.breakdown.resident, plan.breakdown.resident),
        "cli_config_same": (cli.config.n_ctx, cli.config.type_k, cli.config.flash_attn, cli.config.n_ubatch)
        == (c.n_ctx, c.type_k, c.flash_attn, c.n_ubatch),
        "predicted_resident": plan.breakdown.resident, "predicted_kept": plan.breakdown.kept,
        "measured_resident": measured, "resident_error_pct": pct_error(plan.breakdown.resident, measured),
        "predicted_committed": plan.breakdown.committed,
        "measured": {k: m[k] for k in ("context_peak", "job_peak", "after_checkpoints_peak", "after_save_peak",
                                       "load_peak_growth", "save_copied_bytes", "checkpoint_bytes_max_held",
                                       "turns_intervals_kept")
                     if k in m},
        "planned_parts": {k: getattr(plan.breakdown, k) for k in ("weights", "kv", "compute", "output", "runtime",
                                                                   "kept")},
        "llama_buffers": {k: sum(m["buffers"].get(k, {}).values()) for k in ("model", "KV", "RS", "compute",
                                                                              "output")},
        "estimate": plan.breakdown.estimate,
    }
