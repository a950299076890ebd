"""``hisho bench plan``: are the planner's two predictions right?

For the default model (or ``--model``) at n_ctx 512, 2048 and 8192 with f16 and q8_0 KV, each cell loads the
model for real in a FRESH process (``python -m hisho.engine.probe measure``: the engine's own Runtime, mmap as
the engine does), fills the whole context with full ubatches, and compares:
- predicted ``resident`` against the measured peak RSS growth over the process's baseline before the load;
- predicted ``committed`` against the buffer sizes llama.cpp reported for that load plus our engine's arrays.
Errors are (predicted - measured) / measured in percent; ``worst_under_pct`` is the largest resident
under-prediction (positive, 0 if none).
"""

from __future__ import annotations

import argparse
from typing import Any

from hisho.core import settings as settings_mod
from hisho.core.gguf_facts import read_facts
from hisho.core.launch import open_model
from hisho.core.planner import calibration_for
from hisho.core.planner.calibrate import run_probe
from hisho.core.planner.memory import Config, estimate
from hisho.core.protocol import LoadParams

CONTEXTS = (512, 2048, 8192)
KV_TYPES = ("f16", "q8_0")


def run(args: argparse.Namespace) -> dict[str, Any]:
    s = settings_mod.load()
    model_path = open_model(getattr(args, "model", None))
    facts = read_facts(model_path)
    n_batch = int(s["n_batch"])
    calib = calibration_for(facts, n_ubatch=n_batch)
    cells = []
    for n_ctx in CONTEXTS:
        if facts.context_length and n_ctx > facts.context_length:
            continue
        for kv in KV_TYPES:
            cfg = Config(n_ctx=n_ctx, type_k=kv, type_v=kv, flash_attn=True, n_batch=n_batch, n_ubatch=n_batch)
            cells.append(_cell(facts, cfg, calib, str(model_path), int(s["n_threads"])))
    under = [-c["resident_error_pct"] for c in cells if c["resident_error_pct"] < 0]
    return {
        "model": str(model_path),
        "calibrated": calib is not None,
        "cells": cells,
        "worst_abs_error_pct": round(max(abs(c["resident_error_pct"]) for c in cells), 3),
        "worst_under_pct": round(max(under, default=0.0), 3),
        "worst_committed_error_pct": round(max(abs(c["committed_error_pct"]) for c in cells), 3),
    }


def _cell(facts: Any, cfg: Config, calib: Any, model_path: str, n_threads: int) -> dict[str, Any]:
    predicted = estimate(facts, cfg, calib)
    params = LoadParams(model_path=model_path, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch,
                        n_threads=n_threads, flash_attn=cfg.flash_attn, type_k=cfg.type_k, type_v=cfg.type_v)
    m = run_probe("measure", {"params": params.to_dict()}, timeout=1800)
    buffers = m["buffers"]
    reported = sum(sum(buffers[k].values()) for k in ("model", "KV", "compute", "output"))
    measured_committed = reported + int(m["our_arrays"])
    measured_resident = int(m["peak_growth"])
    return {
        "n_ctx": cfg.n_ctx, "type_k": cfg.type_k, "type_v": cfg.type_v, "filled_tokens": m["filled"],
        "predicted_resident": predicted.resident, "measured_resident": measured_resident,
        "resident_error_pct": _pct(predicted.resident, measured_resident),
        "predicted_committed": predicted.committed, "measured_committed": measured_committed,
        "committed_error_pct": _pct(predicted.committed, measured_committed),
    }


def _pct(predicted: int, measured: int) -> float:
    return round(100.0 * (predicted - measured) / measured, 3) if measured else 0.0
