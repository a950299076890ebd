"""``hisho bench plan [--model PATH | --matrix [--only SHAPE[:QUANT]]]``: are the planner's two predictions right?

Each cell loads the model for real in a FRESH process (``python -m hisho.engine.measure.probe measure``: the engine's
own Runtime, mmap or not as the engine decides), fills the whole context and compares:
- predicted ``resident`` against the measured peak RSS growth (VmHWM) over the process's baseline before the
  load (the load's own peak included: reading a model without mmap passes through a buffer);
- predicted ``committed`` against the buffer sizes llama.cpp reported for that load plus our engine's arrays.
Errors are (predicted - measured) / measured in percent; ``worst_under_pct`` is the largest under-prediction
(positive, 0 if none) of either figure.

- Default: the bundled model (or ``--model``) at n_ctx 512, 2048 and 8192, f16 and q8_0 KV. The bundled model
  is filled token by token (full ubatches); any other model through a synthetic KV state plus one real ubatch
  (probe.py ``fill="state"``: the same full cache and largest graph, in seconds instead of minutes).
- ``--matrix``: every true-shape model (bench/shapes.py: Llama-3.2-1B/3B, Qwen2.5-1.5B, Gemma-3-1B) in every
  quant mix (F16 for the 1B only) x n_ctx 1024 and 4096 x f16 / q8_0 KV. Files are generated on first use and
  cached. ``--only llama-3.2-1b:Q4_0`` (repeatable, comma-separated) runs a subset.

Each cell is loaded as the app would load it: flash attention as the plan chooses (``gate.apply_plan``: off on
the CPU for an f16 cache under a cap), recorded as the cell's ``flash_attn``. ``--fa-both`` also measures the
other choice for every f16 cell (a quantized V cache needs flash attention on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from hisho.core import settings as settings_mod
from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import Machine, detect
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.models.store import ModelStore
from hisho.core.planner import calibration_for
from hisho.core.planner.calibrate import ProbeFailed, run_probe
from hisho.core.planner.gate import apply_plan
from hisho.core.planner.launch import open_model
from hisho.core.planner.memory import Calibration, Config, estimate
from hisho.core.units import MIB

log = logging.getLogger("hisho.bench")

# A cell's probe loads, fills and measures one configuration; on a busy 2-core box at idle priority the first
# 3B cell took over 30 minutes, so the limit is generous: it only catches a hung child.
PROBE_TIMEOUT_S = 3 * 3600
CONTEXTS = (512, 2048, 8192)
MATRIX_CONTEXTS = (1024, 4096)
KV_TYPES = ("f16", "q8_0")


def matrix_models(only: str | None = None) -> list[tuple[str, str]]:
    """(shape, quant) pairs of the matrix, optionally only those ``only`` names ("shape[:quant],...", in that
    order)."""
    from hisho.bench.shapes import QUANTS, SHAPES

    pairs = [(s, q) for s in SHAPES if SHAPES[s].matrix for q in QUANTS if q != "F16" or s == "llama-3.2-1b"]
    if not only:
        return pairs
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    # In the order given: a run that may be stopped measures the cells that matter most first.
    keep = [(s, q) for w in wanted for s, q in pairs if w in (s, f"{s}:{q}")]
    keep = list(dict.fromkeys(keep))
    if not keep:
        raise SystemExit(f"hisho: error: --only {only!r} matches no matrix cell (shapes: {', '.join(SHAPES)})")
    return keep


def run(args: argparse.Namespace) -> dict[str, Any]:
    s = settings_mod.load()
    n_batch = int(s["n_batch"])
    machine = detect()
    fa_allowed = bool(s["flash_attn"])
    fa_both = bool(getattr(args, "fa_both", False))
    cells: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    if getattr(args, "profiles", False):
        from hisho.bench.plan_profiles import PROFILE_CTX, profile_cells

        return profile_cells(getattr(args, "only", None), PROFILE_CTX, getattr(args, "kv_type", None) or "f16",
                             machine)
    if getattr(args, "kept", False):
        from hisho.bench.plan_kept import kept_cells

        return kept_cells(getattr(args, "only", None), n_batch, int(s["n_threads"]), machine, fa_allowed,
                          kv_types=KV_TYPES, cell_configs=cell_configs, summary=summary)
    if getattr(args, "matrix", False):
        from hisho.bench.shapes import model_file

        for shape, quant in matrix_models(getattr(args, "only", None)):
            started = time.perf_counter()
            path = model_file(shape, quant)
            gen_s = time.perf_counter() - started
            model_cells = _model_cells(path, MATRIX_CONTEXTS, n_batch, int(s["n_threads"]), machine, fill="state",
                                       label=f"{shape}:{quant}", keep_going=True, fa_allowed=fa_allowed,
                                       fa_both=fa_both)
            cells += [c for c in model_cells if "error" not in c]
            failed += [c for c in model_cells if "error" in c]
            models.append({"model": f"{shape}:{quant}", "path": str(path), "generate_s": round(gen_s, 2)})
        out: dict[str, Any] = {"matrix": True, "contexts": list(MATRIX_CONTEXTS), "models": models}
    else:
        model_path = open_model(getattr(args, "model", None), ModelStore())
        bundled = getattr(args, "model", None) is None
        cells = _model_cells(model_path, CONTEXTS, n_batch, int(s["n_threads"]), machine,
                             fill="decode" if bundled else "state", fa_allowed=fa_allowed, fa_both=fa_both)
        out = {"model": str(model_path)}
    if not cells:
        raise SystemExit(f"hisho: error: no cell measured ({len(failed)} failed: {failed[0]['error'] if failed else ''})")
    out.update(summary(cells))
    out["cells"] = cells
    if failed:
        out["failed_cells"] = failed
    return out


def summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    under = [-c[k] for c in cells for k in ("resident_error_pct", "committed_error_pct") if c[k] < 0]
    worst = max(cells, key=lambda c: abs(c["resident_error_pct"]))
    return {
        "cells_measured": len(cells),
        "worst_abs_error_pct": round(max(abs(c[k]) for c in cells
                                         for k in ("resident_error_pct", "committed_error_pct")), 3),
        "worst_under_pct": round(max(under, default=0.0), 3),
        "worst_resident_error_pct": round(abs(worst["resident_error_pct"]), 3),
        "worst_resident_cell": {k: worst.get(k) for k in ("model", "n_ctx", "type_k", "resident_error_pct")},
        "worst_committed_error_pct": round(max(abs(c["committed_error_pct"]) for c in cells), 3),
    }


def cell_configs(model_path: Path, n_ctx: int, kv: str, n_batch: int, machine: Machine, *,
                 fa_allowed: bool = True, fa_both: bool = False) -> list[Config]:
    """The configurations of one cell, the plan's first: flash attention as ``gate.apply_plan`` sets it for a
    CPU load of ``model_path`` (never refused here: a cell that does not fit is still measured), then, with
    ``fa_both`` and an f16 cache, the other choice."""
    params = LoadParams(model_path=str(model_path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                        flash_attn=fa_allowed, type_k=kv, type_v=kv)
    planned = apply_plan(params, want_gpu_layers=0, override=True, machine=machine)
    cfg = Config(n_ctx=n_ctx, type_k=kv, type_v=kv, flash_attn=planned.flash_attn, n_batch=n_batch,
                 n_ubatch=planned.n_ubatch)
    if fa_both and kv == "f16":
        # The other choice at the load's own ubatch (off with a smaller one only where the plan picks it).
        return [cfg, dataclasses.replace(cfg, flash_attn=not cfg.flash_attn, n_ubatch=n_batch)]
    return [cfg]


def _model_cells(model_path: Path, contexts: tuple[int, ...], n_batch: int, n_threads: int,
                 machine: Machine, *, fill: str, label: str | None = None, keep_going: bool = False,
                 fa_allowed: bool = True, fa_both: bool = False) -> list[dict[str, Any]]:
    """The cells of one model. With ``label`` (matrix mode) each cell is also written to stderr as one JSON line
    the moment it is measured: a matrix takes an hour on a laptop and a stopped run keeps its cells. With
    ``keep_going`` a cell whose probe fails (a starved or crashed child) is recorded with its error and the
    matrix goes on."""
    facts = read_facts(model_path)
    calib = calibration_for(facts, n_ubatch=n_batch)  # before the plan: apply_plan reads only a cached one
    cpu = machine.cpu or None
    cells = []
    for n_ctx in contexts:
        if facts.context_length and n_ctx > facts.context_length:
            continue
        for kv in KV_TYPES:
            configs = cell_configs(model_path, n_ctx, kv, n_batch, machine, fa_allowed=fa_allowed, fa_both=fa_both)
            for cfg in configs:
                try:
                    # A cell whose plan took a smaller ubatch (flash attention off) is priced by its own dry run.
                    own = calib if cfg.n_ubatch == n_batch else calibration_for(facts, n_ubatch=cfg.n_ubatch)
                    cell = _cell(facts, cfg, own, cpu, str(model_path), n_threads, fill)
                except ProbeFailed as e:
                    if not keep_going:
                        raise
                    log.warning("cell %s n_ctx %d %s fa %s failed: %s", label, n_ctx, kv, cfg.flash_attn, e)
                    cell = {"n_ctx": n_ctx, "type_k": kv, "type_v": kv, "flash_attn": cfg.flash_attn,
                            "error": str(e)}
                cell["planned"] = cfg is configs[0]
                if label is not None:
                    cell["model"] = label
                    sys.stderr.write(json.dumps(cell) + "\n")
                    sys.stderr.flush()
                cells.append(cell)
    return cells


def _cell(facts: ModelFacts, cfg: Config, calib: Calibration | None, cpu: frozenset[str] | None,
          model_path: str, n_threads: int, fill: str) -> dict[str, Any]:
    planned = estimate(facts, cfg, calib, cpu=cpu)
    # This cell fills the context and takes no checkpoint: it measures the plan without the engine's kept state
    # (checkpoints, save buffers), which ``--kept`` measures.
    predicted = dataclasses.replace(planned, resident=planned.resident_bare,
                                    committed=planned.committed - planned.kept_committed)
    # As launch.load_params_for does: the plan tells the engine whether to map the file.
    params = LoadParams(model_path=model_path, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch,
                        n_threads=n_threads, flash_attn=cfg.flash_attn, type_k=cfg.type_k, type_v=cfg.type_v,
                        use_mmap=predicted.mmap if cpu else None)
    # The synthetic fill needs to know the state's layout: how many attention caches precede a recurrent state.
    caches = {"dense": 1, "swa": 2, "hybrid": 2 if any(facts.swa_layers) else 1, "recurrent": 0}[facts.memory]
    m = run_probe("measure", {"params": params.to_dict(), "fill": fill, "n_swa": facts.n_swa, "kv_caches": caches},
                  timeout=PROBE_TIMEOUT_S)
    log.info("measured %s n_ctx %d %s: %.1f MiB", Path(model_path).name, cfg.n_ctx, cfg.type_k,
             int(m["peak_growth"]) / MIB)
    buffers = m["buffers"]
    reported = sum(sum(buffers.get(k, {}).values()) for k in ("model", "KV", "RS", "compute", "output"))
    measured_committed = reported + int(m["our_arrays"])
    measured_resident = int(m["peak_growth"])
    return {
        "n_ctx": cfg.n_ctx, "type_k": cfg.type_k, "type_v": cfg.type_v, "flash_attn": cfg.flash_attn,
        "filled_tokens": m["filled"],
        "fill": m.get("fill", fill), "mmap": m.get("mmap"), "predicted_mmap": predicted.mmap,
        "repacked_mib": round(predicted.repacked / MIB, 1),
        "measured_repack_mib": round(buffers["model"].get("CPU_REPACK", 0) / MIB, 1),
        "load_s": round(float(m.get("load_s", 0.0)), 3),
        "predicted_resident": predicted.resident, "measured_resident": measured_resident,
        "resident_error_pct": _pct(predicted.resident, measured_resident),
        "predicted_committed": predicted.committed, "measured_committed": measured_committed,
        "committed_error_pct": _pct(predicted.committed, measured_committed),
        "estimate": predicted.estimate,
    }


def _pct(predicted: int, measured: int) -> float:
    return round(100.0 * (predicted - measured) / measured, 3) if measured else 0.0
