"""The prompt-offload probe: with a partial offload, time one short prompt batch with llama.cpp's ``op_offload``
off and on, on the model just loaded, and load the context with what reads faster (the rule and where the answer
is kept: ``hisho.core.planner.offload``; docs/vulkan.md). Engine thread only, before the load's own context.

Each way gets a context of its own (``op_offload`` is fixed when a context is made). One untimed batch goes
first, the CPU way: a GPU backend builds its pipelines on first use, and that batch builds those of the
offloaded layers, which the device way's products of the same weight types use too. A second timed pair only
when the first does not settle it; the device way's first batch is the costly one where it loses (the software
device: ~8 s for 64 tokens on a 2-core box, ~30 s while it is loaded), and it runs once per split.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import llama_cpp

from hisho.core.engine.protocol import LoadParams
from hisho.engine.lib import backends
from hisho.engine.lib.llama_setup import Batch, context_params

if TYPE_CHECKING:
    from hisho.core.planner.offload import OffloadProbe

log = logging.getLogger("hisho.engine")


def decide(model: Any, params: LoadParams) -> tuple[LoadParams, dict[str, Any] | None]:
    """``params`` with ``op_offload`` decided where it is open and the split is partial (kept probe, else a new
    one), and the probe behind it ("kept": from the cache). Anything else comes back as it was, with None."""
    n_layer = int(llama_cpp.llama_model_n_layer(model))
    if (params.op_offload is not None or not 0 < params.n_gpu_layers < n_layer + 1
            or not llama_cpp.llama_supports_gpu_offload()):  # a CPU build puts no layer on a device
        return params, None
    # Only a partial offload imports the planner's side (a CPU or full load keeps the engine process lean).
    from hisho.core.planner import offload as rule
    from hisho.core.planner.calibrate import library_version

    key = (params.model_path, params.n_gpu_layers, gpu_keys(), library_version())
    found = rule.recall(*key)
    kept = found is not None
    if found is None:
        try:
            found = measure(model, params)
        except RuntimeError as exc:  # a context the probe could not make or run: llama.cpp's default stands
            log.warning("prompt-offload probe failed (%s); leaving llama.cpp's default", exc)
            return params, None
        rule.remember(*key, found)
    log.info("prompt offload %s with %d of %d layers offloaded (%s probe: %d tokens in %.3f s on the device, "
             "%.3f s on the CPU)", "on" if found.chosen else "off", params.n_gpu_layers, n_layer + 1,
             "kept" if kept else "new", found.n_tokens, min(found.on_s), min(found.off_s))
    return dataclasses.replace(params, op_offload=found.chosen), {**found.to_dict(), "kept": kept}


def measure(model: Any, params: LoadParams) -> OffloadProbe:
    """Time ``rule.PROBE_TOKENS`` prompt tokens each way, CPU first, until ``rule.settled``."""
    from hisho.core.planner import offload as rule

    n = min(rule.PROBE_TOKENS, max(32, params.n_ubatch))
    tokens = [(i * 7919 + 11) % int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)))
              for i in range(n)]
    small = dataclasses.replace(params, n_ctx=256, n_batch=n, n_ubatch=n, n_seq_max=1, kv_unified=True)
    times: dict[bool, list[float]] = {False: [], True: []}
    while not rule.settled(times[True], times[False]):
        for on in (False, True):
            times[on].append(_time_batch(model, dataclasses.replace(small, op_offload=on), tokens,
                                         warm=not on and not times[on]))
    return rule.OffloadProbe(on_s=times[True], off_s=times[False], n_tokens=n)


def _time_batch(model: Any, params: LoadParams, tokens: list[int], *, warm: bool) -> float:
    """Seconds one decode of ``tokens`` takes in a fresh context made from ``params`` (after one untimed decode
    of them when ``warm``)."""
    ctx = llama_cpp.llama_init_from_model(model, context_params(params))
    if not ctx:
        raise RuntimeError(f"no context for the probe (op_offload {params.op_offload})")
    batch = Batch(len(tokens), 1)

    def once() -> float:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        batch.clear()
        for i, tok in enumerate(tokens):
            batch.add(tok, i, 0, i == len(tokens) - 1)
        start = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch.raw) != 0:
            raise RuntimeError("llama_decode failed in the probe")
        return time.perf_counter() - start

    try:
        if warm:
            once()
        return once()
    finally:
        batch.free()
        llama_cpp.llama_free(ctx)


def gpu_keys() -> list[str]:
    """The GPU devices ggml sees, as ``rule.device_key`` names them (the planner keys the same list)."""
    from hisho.core.planner.offload import device_key

    return [device_key(d.name, d.description) for d in backends.device_list(backends.ggml_library())
            if d.type in (1, 2)]  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU
