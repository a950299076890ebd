"""The planner at load time: ``launch.load_params_for`` passes every LoadParams through ``apply_plan``.

- ``n_gpu_layers`` from settings is -1 ("what the plan says"): the plan picks the most layers that fit; on a
  build without a GPU backend that is 0 (no device probe needed).
- Flash attention (docs/flash-attention.md): on a CPU-only load with an f16 KV cache the plan turns it off when
  the attention scores of a ubatch stay under ``search.FA_OFF_MAX_SCORES`` (with a smaller ubatch at long
  context, ``search.attention_off_ubatch``) and the load still fits: ggml-cpu's flash attention walks the whole
  cache row by row for a batch under 64 tokens, so a short question at long context was 2-5x slower with it, a
  decode step 2-2.6x, and a prefill slice at 4K-16K depth 1.3x. ``flash_attn`` False in the
  settings keeps it off; a quantized V cache keeps it on (llama.cpp needs it). Where the engine measured this
  model here (``attention.py``), the measurement weighed for the front end decides between off and on.
- Prompt offload with a partial offload (offload.py): the engine's kept probe of this split, if there is one.
- The configuration is priced for this machine. If it will not fit, ``PlanRefused`` (a UserError: one clear
  line, with what would fit instead) is raised, unless ``override`` is set: then the load goes ahead with a
  warning in the log. Callers that let the user insist (a "Load anyway" button, ``--force``) pass override.

Cheap by design: header facts come from the facts cache, the calibration only if it is already cached (the
first plan of a model runs the dry run through ``hisho plan`` or the planner panel, never here; until then
the formulas price the load and the message says "estimate").
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from hisho.core import machine as machine_mod
from hisho.core.engine.protocol import LoadParams
from hisho.core.errors import UserError
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner import offload
from hisho.core.planner.calibrate import cached, gpu_backends, library_version
from hisho.core.planner.memory import Calibration, Config
from hisho.core.planner.search import Candidate, Plan, Search, as_loaded, price
from hisho.core.planner.vision import VisionCost, cost_of, less_vision
from hisho.core.units import GIB

log = logging.getLogger("hisho.planner")


class PlanRefused(UserError):
    """The plan says this load will not fit. ``plan`` holds the priced configuration."""

    def __init__(self, message: str, plan: Plan) -> None:
        super().__init__(message)
        self.plan = plan


def gpu_backend_present() -> bool:
    """Whether llama-cpp-python ships a GPU backend library (found without importing llama_cpp)."""
    return bool(gpu_backends())


def apply_plan(params: LoadParams, *, want_gpu_layers: int, override: bool = False,
               machine: machine_mod.Machine | None = None, saves_kv: bool = False) -> LoadParams:
    """``params`` with the plan's GPU layers (when ``want_gpu_layers`` < 0), checked against the budget.
    ``saves_kv``: the load saves and restores KV chunk files (the window's profiles): its save buffers count."""
    return planned(params, want_gpu_layers=want_gpu_layers, override=override, machine=machine,
                   saves_kv=saves_kv)[0]


def planned(params: LoadParams, *, want_gpu_layers: int, override: bool = False,
            machine: machine_mod.Machine | None = None, saves_kv: bool = False) -> tuple[LoadParams, Plan | None]:
    """``apply_plan`` and the plan the load is judged by (None: a file that is no GGUF; the load says so)."""
    try:
        facts = read_facts(params.model_path)
    except UserError:
        return params, None  # the engine's own load reports a bad file; the plan has nothing to add
    m = machine or machine_mod.detect(probe_devices=gpu_backend_present())
    budget = m.budget()
    vision = _vision(params)
    budget = less_vision(budget, vision)  # the projector the load carries is held out (vision.py)
    calib = cached(facts, params.n_ubatch)
    cfg = load_config(params, saves_kv=saves_kv, n_gpu_layers=max(0, want_gpu_layers))
    if want_gpu_layers < 0:
        cfg = dataclasses.replace(cfg, n_gpu_layers=_best_gpu_layers(facts, cfg, budget, calib))
        params = dataclasses.replace(params, n_gpu_layers=cfg.n_gpu_layers)
    plan = as_loaded(facts, cfg, budget, calib, cpu=m.cpu or None)
    if vision is not None:
        plan = dataclasses.replace(plan, vision=vision)
    params = _kept_prompt_offload(params, facts, m)
    if cfg.flash_attn and not plan.config.flash_attn:
        log.info("flash attention off, %d-token ubatches: prompts and replies at long context run faster "
                 "without it on this CPU", plan.config.n_ubatch)
        params = dataclasses.replace(params, flash_attn=False, n_ubatch=plan.config.n_ubatch)
    if params.use_mmap is None and (m.cpu or (calib is not None and calib.cpu_features)):
        # The plan knows whether llama.cpp repacks weights on this CPU: tell the engine how to load, so it does
        # not read the header itself (that imports the gguf package: ~7 MiB in the engine process).
        params = dataclasses.replace(params, use_mmap=plan.breakdown.mmap)
    if plan.fits:
        log.info("plan: %s", plan.reason)
        return params, plan
    message = _refusal(plan, facts, budget, calib)
    if override:
        log.warning("loading anyway (override): %s", message)
        return params, plan
    raise PlanRefused(message, plan)


def _vision(params: LoadParams) -> VisionCost | None:
    """The cost of the projector ``params`` loads (None: none, or an unreadable one: the engine says why)."""
    if not params.mmproj_path:
        return None
    from hisho.core.models.projector_facts import read_projector_facts

    try:
        return cost_of(read_projector_facts(params.mmproj_path), Path(params.mmproj_path).name)
    except (UserError, OSError) as exc:
        log.warning("projector %s not counted: %s", params.mmproj_path, exc)
        return None


def _kept_prompt_offload(params: LoadParams, facts: ModelFacts, m: machine_mod.Machine) -> LoadParams:
    """``params`` with the kept probe's prompt offload for a partial offload (offload.py); unmeasured, the
    engine measures it at load."""
    if params.op_offload is not None or not offload.partial(params.n_gpu_layers, facts.n_layer):
        return params
    devices = [offload.device_key(d.name, d.description) for d in m.gpus]
    kept = offload.recall(params.model_path, params.n_gpu_layers, devices, library_version())
    if kept is None:
        return params
    log.info("prompt offload %s (kept probe of this split)", "on" if kept.chosen else "off")
    return dataclasses.replace(params, op_offload=kept.chosen)


def load_config(params: LoadParams, *, saves_kv: bool, n_gpu_layers: int | None = None) -> Config:
    """The planner's configuration for ``params`` (what the load asks for, before ``as_loaded``'s rules)."""
    return Config(n_ctx=params.n_ctx, type_k=params.type_k, type_v=params.type_v, flash_attn=params.flash_attn,
                  n_gpu_layers=params.n_gpu_layers if n_gpu_layers is None else n_gpu_layers,
                  n_batch=params.n_batch, n_ubatch=params.n_ubatch, n_seq_max=params.n_seq_max,
                  swa_full=params.swa_full, kv_unified=params.kv_unified, saves_kv=saves_kv)


def _best_gpu_layers(facts: ModelFacts, cfg: Config, budget: machine_mod.Budget, calib: Calibration | None) -> int:
    if budget.gpu <= 0:
        return 0
    for ngl in range(facts.n_layer + 1, -1, -1):
        if price(facts, dataclasses.replace(cfg, n_gpu_layers=ngl), budget, calib).fits:
            return ngl
    return 0


def _refusal(plan: Plan, facts: ModelFacts, budget: machine_mod.Budget, calib: Calibration | None) -> str:
    c = plan.config
    est = " (estimate)" if plan.breakdown.estimate else ""
    msg = (f"{Path(facts.source).name} with {c.n_ctx} tokens of {c.type_k} KV needs {plan.need / GIB:.2f} GiB "
           f"of {budget.metric} memory{est}; this machine can give it {budget.ram / GIB:.2f} GiB")
    alt = Search(budget, min_ctx=256, target_ctx=c.n_ctx, n_batch=c.n_batch, n_ubatch=c.n_ubatch,
                 n_seq_max=c.n_seq_max, saves_kv=c.saves_kv).best([Candidate(facts, calib)])
    if alt.fits:
        msg += f"; {alt.config.n_ctx} tokens with {alt.config.type_k} KV would fit"
    return msg
