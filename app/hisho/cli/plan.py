"""``hisho plan [MODEL … | hf:REPO] [--ram-gib X] [--gpu-gib Y] [--uma] [--min-ctx N] [--profile P] [--json]``.

The plan is for one front end's load (``--profile``: window, serve [--parallel N], generate, summarize): its
sequences and whether it saves KV change what the same file needs.

Several MODELs (paths or store names) are the candidate files, typically the quants of one model; ``hf:REPO``
takes every GGUF in a hub repository (headers only, by range requests). The first plan of a local file runs
llama.cpp's dry run once (a few seconds); later plans answer from the cache in well under a second.
Exit 2 with one line for bad input (not a GGUF, truncated, absurd budget).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from hisho.core.units import GIB

if TYPE_CHECKING:
    from hisho.core.machine import Machine
    from hisho.core.models.store import ModelStore
    from hisho.core.planner import Plan
    from hisho.core.settings import Settings

# planner.profiles.PLAN_PROFILES, spelled here so that building the parser imports no planner (tests compare)
PLAN_PROFILES = ("window", "serve", "generate", "summarize")


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="memory plan: quant, context, KV type and GPU layers that fit")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="GGUF paths, model store names, or hf:OWNER/REPO[/FILE] (default: the bundled model)")
    p.add_argument("--ram-gib", type=float, default=None, help="plan as if the machine had this much RAM")
    p.add_argument("--gpu-gib", type=float, default=None, help="plan as if the GPU could use this much memory")
    p.add_argument("--uma", action="store_true", default=None,
                   help="the GPU shares RAM (iGPU / Apple): one pool")
    p.add_argument("--min-ctx", type=int, default=None, help="smallest acceptable context (default: settings)")
    p.add_argument("--ctx", type=int, default=None, help="context wanted (default: settings n_ctx, >= min-ctx)")
    p.add_argument("--no-calibrate", action="store_true", help="formulas only, no llama.cpp dry run")
    p.add_argument("--profile", choices=PLAN_PROFILES, default="window",
                   help="the front end the plan is for: its sequences and whether it saves KV (default: window)")
    p.add_argument("--parallel", type=int, default=None,
                   help="with --profile serve: the server's --parallel (--ctx is then all sequences' context together)")
    p.add_argument("--measure-attention", action="store_true",
                   help="time flash attention on and off for the planned model here (seconds to minutes), keep "
                        "the answer, and plan with it (otherwise measured after the model's first load)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from hisho.core import machine as machine_mod
    from hisho.core import settings as settings_mod
    from hisho.core.errors import UserError
    from hisho.core.planner import check_budget, explain, make_plan
    from hisho.core.services import open_models

    s = settings_mod.load()
    store = open_models()       # one registry for the command: the context's choice and the plan read it
    min_ctx = int(args.min_ctx if args.min_ctx is not None else s["min_ctx"])
    if min_ctx < 256:
        raise UserError(f"--min-ctx must be at least 256 tokens, not {min_ctx}")
    parallel = args.parallel
    if parallel is None and args.profile == "serve":
        from hisho.cli.serve import DEFAULT_PARALLEL

        parallel = DEFAULT_PARALLEL  # what ``hisho serve`` loads without --parallel
    chosen = int(args.ctx) if args.ctx is not None else front_end_ctx(args.models, s, args.profile, parallel, store)
    target = max(chosen, min_ctx)
    machine = machine_mod.detect()
    budget = check_budget(machine, args.ram_gib, args.gpu_gib, args.uma)
    plan = make_plan(args.models, machine, budget, min_ctx=min_ctx, target_ctx=target,
                     calibrate_missing=not args.no_calibrate, n_batch=int(s["n_batch"]),
                     n_ubatch=int(s["n_batch"]), profile=args.profile, parallel=parallel,
                     store=store)
    if args.measure_attention and measure_attention(plan):
        plan = make_plan(args.models, machine, budget, min_ctx=min_ctx, target_ctx=target,
                         calibrate_missing=not args.no_calibrate, n_batch=int(s["n_batch"]),
                         n_ubatch=int(s["n_batch"]), profile=args.profile, parallel=parallel, store=store)
    plan = past_trained(plan, target, calibrate=not args.no_calibrate)
    data = plan.to_dict()
    head, detail = explain.over_trained(plan)
    if head:
        data["warning"] = f"{head}: {detail}"
    data["device"] = _device(machine)
    if args.json:
        from hisho.cli.output import emit_json

        emit_json(data)
    else:
        sys.stdout.write(render(data))
    return 0


def measure_attention(plan: Plan) -> bool:
    """Time flash attention on and off for the plan's model at its context (``planner.attention.measure``) and
    keep it; False, with a line on stderr, where the choice is not open (a GPU load, a quantized cache, a
    context too long for the rule's ubatches, a file not on this machine)."""
    from pathlib import Path

    from hisho.core.planner import attention
    from hisho.core.planner.search import attention_off_ubatch

    req = plan.requested
    ub = attention_off_ubatch(plan.facts, req) if plan.fits and plan.facts is not None else 0
    if not ub or plan.facts is None or not Path(plan.facts.source).is_file():
        sys.stderr.write("flash attention is not open to a measurement for this plan (it stays as the rules "
                         "say: docs/flash-attention.md)\n")
        return False
    from hisho.core.planner.calibrate import ProbeFailed

    try:
        probe = attention.measure(plan.facts.source, req.n_ctx, req.n_ubatch, ub,
                                  seqs=attention.sequences(req.n_seq_max, req.kv_unified))
    except ProbeFailed as exc:
        sys.stderr.write(f"{exc}; flash attention stays as the rules say\n")
        return False
    sys.stderr.write(f"{probe.summary(attention.workload(req))}\n")
    return True


def front_end_ctx(specs: list[str], s: Settings, profile: str, parallel: int | None, store: ModelStore) -> int:
    """The context the front end would load one local model with (``launch.chosen_ctx``: the model's own choice,
    else the settings' capped at its trained context; ``serve``: that per request, times its sequences); the
    settings' ``n_ctx`` for several files or a hub repository."""
    from hisho.core.errors import UserError
    from hisho.core.planner.launch import chosen_ctx, open_model

    per_seq = int(s["n_ctx"])
    if len(specs) <= 1 and not any(spec.startswith("hf:") for spec in specs):
        try:
            per_seq = chosen_ctx(open_model(specs[0] if specs else None, store), s)
        except UserError:
            pass  # the plan itself reports a bad file
    return per_seq * (max(1, parallel or 1) if profile == "serve" else 1)


def past_trained(plan: Plan, target: int, *, calibrate: bool) -> Plan:
    """``plan`` at ``target`` tokens when that is longer than the model was trained on (the search stops at the
    trained context): a longer context is allowed, priced as the load runs it, and the plan says so
    (``explain.over_trained``)."""
    import dataclasses

    from hisho.core.planner import as_loaded, calibration_for, explain

    facts = plan.facts
    if facts is None or target <= plan.config.n_ctx:
        return plan
    cfg = dataclasses.replace(plan.requested, n_ctx=target)
    if not explain.over_trained(dataclasses.replace(plan, config=cfg))[0]:
        return plan  # shorter only because it does not fit: the search said why
    calib = calibration_for(facts, run=calibrate, n_ubatch=cfg.n_ubatch)
    longer = as_loaded(facts, cfg, plan.budget, calib, cpu=plan.cpu)
    return dataclasses.replace(longer, profile=plan.profile, alternatives=plan.alternatives,
                               reason=f"{target} tokens as asked, past the trained context; {longer.reason}")


def _device(machine: Machine) -> dict[str, Any] | None:
    """The GPU device the plan puts layers on (the first llama.cpp lists), as the device probe read it."""
    if not machine.supports_gpu_offload or not machine.gpus:
        return None
    dev = machine.gpus[0]
    return {"name": dev.name, "description": dev.description, "type": dev.type, "total_bytes": dev.total,
            "free_bytes": dev.free}


def render(d: dict[str, Any]) -> str:
    def gib(n: int) -> str:
        return f"{n / GIB:6.2f} GiB"

    b = d["breakdown"]
    lines = [
        *([f"WARNING    {d['warning']}"] if d.get("warning") else []),
        f"model      {d['model']}",
        f"choice     {d['quant']}  n_ctx {d['n_ctx']}  KV {d['type_k']}/{d['type_v']}  "
        f"flash_attn {'on' if d['flash_attn'] else 'off'}  gpu layers {d['n_gpu_layers']}",
        f"fits       {'yes' if d['fits'] else 'NO'}{'  (estimate only)' if d['estimate'] else ''}",
        *([f"device     {dev['description'] or dev['name']} ({dev['type']}, {dev['total_bytes'] / GIB:.2f} GiB): "
           f"{d['layer_split']['gpu']} of {d['layer_split']['total']} layers"] if (dev := d.get("device")) else []),
        f"budget     {d['budget']}",
        *(f"{part['key']:10s} {gib(part['bytes'])}  {part['label']}" for part in d.get("parts", [])),
        f"committed  {gib(d['committed'])}   resident {gib(d['resident'])}"
        f"   (parts above: {d.get('fit_metric', 'resident')}, for the {d.get('profile') or 'window'} profile)",
        f"allocated  weights {gib(b['weights'])}  kv {gib(b['kv'])}  compute {gib(b['compute'])}  "
        f"output {gib(b['output'])}  runtime {gib(b['runtime'])}  kept {gib(b.get('kept', 0))}",
        *([f"vision     {gib(v['total_bytes'])}  {v['text']}"] if (v := d.get("vision")) else []),
        f"why        {d['reason']}",
    ]
    for alt in d["alternatives"]:
        extra = f"  needs {alt['needs_bytes'] / GIB:.2f} GiB" if "needs_bytes" in alt else ""
        ctx = f"  n_ctx {alt['n_ctx']}" if "n_ctx" in alt else ""
        lines.append(f"  - {alt['what']}{ctx}{extra}")
    for note in d["notes"]:
        lines.append(f"note       {note}")
    return "\n".join(lines) + "\n"
