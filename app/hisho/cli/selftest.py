"""``hisho self-test``: what a packaged app runs to prove itself on a user's machine.

Each step is small and independent; the JSON says which passed, how long each took, and why one failed.
Steps: find the bundled model, start the engine, load, generate, and (where those features are present) save and
restore KV state and plan memory.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import Sampling
from hisho.core.planner.launch import load_params_for, open_model
from hisho.core.units import MIB

log = logging.getLogger("hisho.cli.main")

Step = Callable[[dict[str, Any]], dict[str, Any]]


def _model(ctx: dict[str, Any]) -> dict[str, Any]:
    from hisho.core.services import open_models

    ctx["model_path"] = open_model(None, open_models())
    return {"path": str(ctx["model_path"])}


def _engine(ctx: dict[str, Any]) -> dict[str, Any]:
    client: EngineClient = ctx["client"]
    client.start()
    info = client.engine_info
    backends = info.get("backends") or {}
    return {"pid": info.get("pid"), "llama_cpp": info.get("llama_cpp_version"),
            "gpu_offload": info.get("supports_gpu_offload"), "cpu_variant": backends.get("cpu_variant"),
            "variants_shipped": backends.get("variants", [])}


def _load(ctx: dict[str, Any]) -> dict[str, Any]:
    info = ctx["client"].load(load_params_for(ctx["model_path"], n_ctx=1024))
    return {"n_ctx": info["n_ctx"], "load_s": round(info["load_s"], 3), "chat_template": info["chat_template_source"]}


def _generate(ctx: dict[str, Any]) -> dict[str, Any]:
    result = ctx["client"].generate(
        messages=[{"role": "user", "content": "Reply with one short sentence."}],
        sampling=Sampling(temperature=0.0, max_tokens=24),
    ).collect()
    if result.completion_tokens == 0:
        raise RuntimeError("the model produced no tokens")
    return {"completion_tokens": result.completion_tokens, "tokens_per_s": round(result.tokens_per_s, 1)}


def _kv(ctx: dict[str, Any]) -> dict[str, Any]:
    """Save the sequence's KV to disk, drop it, restore it, and check the reply after restore is the same."""
    from hisho.core.kv.session import KVSession

    client: EngineClient = ctx["client"]
    messages = [{"role": "user", "content": "Name three colours."}]
    greedy = Sampling(temperature=0.0, max_tokens=16)
    client.seq_rm(0)
    fresh = client.generate(messages=messages, sampling=greedy).collect()
    session = KVSession(client)
    try:
        session.save("selftest:kv")
        if not session.flush(60):
            raise RuntimeError("the KV save did not finish")
        client.seq_rm(0)
        report = session.restore("selftest:kv", client.tokenize(messages=messages))
        again = client.generate(messages=messages, sampling=greedy).collect()
        session.delete("selftest:kv")
    finally:
        session.close()
    if report.restored == 0 or again.cached_tokens == 0:
        raise RuntimeError("nothing was restored from the saved KV state")
    if again.text != fresh.text:
        raise RuntimeError("the reply after restoring the KV state differs from the fresh one")
    return {"restored_tokens": report.restored, "bytes": report.loaded_bytes, "restore_s": round(report.seconds, 4)}


def _plan(ctx: dict[str, Any]) -> dict[str, Any]:
    from hisho.core import machine as machine_mod
    from hisho.core.planner import check_budget, make_plan

    machine = machine_mod.detect()
    plan = make_plan([str(ctx["model_path"])], machine, check_budget(machine, None, None, False),
                     min_ctx=1024, target_ctx=4096).to_dict()
    if not plan.get("fits"):
        raise RuntimeError(f"the planner says the default model does not fit: {plan.get('reason')}")
    if plan.get("estimate"):  # the probe subprocess did not answer: a bundle that cannot start it plans blind
        raise RuntimeError("the planner could not run llama.cpp's dry run (the probe process); plan from "
                           "formulas only")
    return {"n_ctx": plan["n_ctx"], "resident_mib": round(plan["resident"] / MIB, 1), "quant": plan["quant"],
            "calibrated": True}


STEPS: list[tuple[str, Step]] = [("model", _model), ("engine", _engine), ("load", _load), ("generate", _generate),
                                 ("kv", _kv), ("plan", _plan)]


def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {"ok": True, "steps": []}
    ctx: dict[str, Any] = {}
    with EngineClient() as client:
        ctx["client"] = client
        for name, step in STEPS:
            start = time.perf_counter()
            entry: dict[str, Any] = {"step": name}
            try:
                entry.update(step(ctx))
                entry["ok"] = True
            except Exception as exc:  # a self-test reports every failure; it never raises
                log.exception("self-test step %s failed", name)
                entry.update(ok=False, error=f"{type(exc).__name__}: {exc}")
                report["ok"] = False
            entry["seconds"] = round(time.perf_counter() - start, 3)
            report["steps"].append(entry)
            if not entry["ok"]:
                break
    return report
