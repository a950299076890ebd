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

from hisho.core.engine_client import EngineClient
from hisho.core.launch import load_params_for, open_model
from hisho.core.protocol import Sampling

log = logging.getLogger("hisho.cli")

Step = Callable[[dict[str, Any]], dict[str, Any]]


def _model(ctx: dict[str, Any]) -> dict[str, Any]:
    ctx["model_path"] = open_model(None)
    return {"path": str(ctx["model_path"])}


def _engine(ctx: dict[str, Any]) -> dict[str, Any]:
    client: EngineClient = ctx["client"]
    client.start()
    info = client.engine_info
    return {"pid": info.get("pid"), "llama_cpp": info.get("llama_cpp_version"),
            "gpu_offload": info.get("supports_gpu_offload")}


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


STEPS: list[tuple[str, Step]] = [("model", _model), ("engine", _engine), ("load", _load), ("generate", _generate)]


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
