"""Will a hub file fit this machine? The planner's answer from the file's header, read by HTTP range requests
before anything is downloaded.

For each ``QuantFile`` the header of every part is read (1 MiB first, more only if the header is longer: see
``gguf_hub.facts_from_ranges``; a split model's tensor table is spread over its parts), the facts are merged
and ``planner.plan_facts`` prices it for this machine's budget with the rules and the dry run the downloaded
file will get (docs/planner.md "One plan"). The verdict:

- **Fits**: the plan fits with the wanted context (settings ``n_ctx``, capped at the trained context) and f16
  KV, using at most 85 % of the budget;
- **Tight**: it fits, but only with a shorter context, a quantized KV cache, or with less than 15 % to spare;
- **Won't fit**: no configuration fits, even at the smallest acceptable context.

Where this machine's speed is known (``planner.speed``: measured by ``hisho bench speed``, or what a file
measured once loaded), each fit also says how fast it would answer ("~12 tok/s · reads 1,000 tokens in ~9 s").
The recommended file is the planner's own choice over all the repository's files: the best quality that fits and
decodes at ``SPEED_FLOOR`` tok/s or faster (any that fits when none is that fast), with its reason in one line.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hisho.core.hub.catalog import QuantFile
from hisho.core.hub.errors import GatedRepo, HubError, endpoint, gated, hub_call
from hisho.core.hub.token import get_token
from hisho.core.machine import Budget, Machine
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.models.gguf_hub import read_hub_facts
from hisho.core.planner import speed
from hisho.core.planner.speed import SPEED_FLOOR
from hisho.core.units import GIB

log = logging.getLogger("hisho.hub")

TIGHT_SHARE = 0.85
# The one vocabulary of fit badges, on the Hub, the Installed list, the first-run chips and the suggestions:
# "slow" is a file that fits (even tightly) but answers slower than SPEED_FLOOR tok/s here (``badge``).
LABELS = {"fits": "Fits", "tight": "Tight", "slow": "Slow here", "wont_fit": "Won't fit", "unknown": "Unknown"}


def badge(verdict: str, decode_tps: float | None) -> str:
    """The badge a verdict shows where this machine's decode speed for the file is ``decode_tps`` (None: not
    known, the memory verdict stands): a file that fits but would answer slower than the floor is "slow"."""
    if verdict in ("fits", "tight") and decode_tps is not None and decode_tps < SPEED_FLOOR:
        return "slow"
    return verdict


@dataclass
class Fit:
    file: QuantFile
    verdict: str                       # fits | tight | wont_fit | unknown
    why: str                           # one line
    plan: dict[str, Any] | None = None
    recommended: bool = False
    header_bytes: int = 0              # bytes read from the hub to decide
    params: int = 0                    # the model's parameter count, from its header
    speed: dict[str, Any] | None = None  # planner.speed.Speed.to_dict() on this machine, where it is known

    @property
    def badge(self) -> str:
        """The badge it shows: the memory verdict, or "slow" where it fits but answers slowly here."""
        return badge(self.verdict, float(self.speed["decode_short"]) if self.speed else None)

    @property
    def label(self) -> str:
        return LABELS[self.badge]

    def to_dict(self) -> dict[str, Any]:
        return {**self.file.to_dict(), "fit": self.verdict, "badge": self.badge, "fit_label": self.label, "why": self.why,
                "recommended": self.recommended, "plan": self.plan, "header_bytes": self.header_bytes,
                "params": self.params, "speed": self.speed}

    @property
    def fast_enough(self) -> bool:
        """Decodes at the speed floor or faster here (True where the speed is not known: nothing to judge)."""
        return self.speed is None or float(self.speed["decode_short"]) >= SPEED_FLOOR


class RangeReader:
    """The two calls ``read_hub_facts`` needs (``info`` and ``cat_file``), answered from the sizes the hub already
    gave and one HTTP range request per read through huggingface_hub's session. Counts the bytes it reads."""

    def __init__(self, f: QuantFile, sizes: dict[str, int]) -> None:
        self.f = f
        self.sizes = sizes
        self.bytes_read = 0

    def _name(self, path: str) -> str:
        return path.split("/", 2)[2]

    def info(self, path: str) -> dict[str, Any]:
        name = self._name(path)
        if name not in self.sizes:
            raise FileNotFoundError(path)
        return {"size": self.sizes[name]}

    def cat_file(self, path: str, start: int, end: int) -> bytes:
        from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazily exported

        url = hf_hub_url(self.f.repo, self._name(path), revision=self.f.revision or None, endpoint=endpoint())
        headers = build_hf_headers(token=get_token())
        headers["Range"] = f"bytes={start}-{end - 1}"
        r = get_session().get(url, headers=headers, follow_redirects=True)
        hf_raise_for_status(r)
        data = r.content[: end - start]  # a server that ignores Range sends everything; keep what was asked
        self.bytes_read += len(r.content)
        return data


def file_facts(f: QuantFile) -> tuple[ModelFacts, int]:
    """Merged header facts of all parts of ``f`` and the bytes read for them."""
    sizes = dict(zip(f.parts, f.part_sizes or [f.size]))
    reader = RangeReader(f, sizes)
    merged: ModelFacts | None = None
    with hub_call(f"{f.repo}:{f.name}"):
        for part in f.parts:
            facts = read_hub_facts(f.repo, part, revision=f.revision or None, fs=reader)
            if merged is None:
                merged = facts
            else:
                tensors = dict(merged.tensor_bytes)
                for k, v in facts.tensor_bytes.items():
                    tensors[k] = tensors.get(k, 0) + v
                merged = dataclasses.replace(merged, tensor_bytes=tensors, n_params=merged.n_params + facts.n_params)
    assert merged is not None
    if len(f.parts) > 1:  # a dry run needs every part on disk: a split file plans from formulas until downloaded
        merged = dataclasses.replace(merged, header_sha="")
    return dataclasses.replace(merged, file_size=f.size), reader.bytes_read


def verdict(p: Any, budget: Budget, wanted_ctx: int) -> tuple[str, str]:
    """(verdict, one-line why) for a planner ``Plan``."""
    d = p.to_dict()
    need = p.need
    share = need / budget.ram if budget.ram else 1.0
    kv = d["type_k"]
    if not p.fits:
        return "wont_fit", (f"needs {need / GIB:.1f} GiB at {d['n_ctx']} tokens; "
                            f"{budget.ram / GIB:.1f} GiB available")
    if d["n_ctx"] < wanted_ctx or kv != "f16" or share > TIGHT_SHARE:
        bits = []
        if d["n_ctx"] < wanted_ctx:
            bits.append(f"context cut to {d['n_ctx']} of {wanted_ctx} tokens")
        if kv != "f16":
            bits.append(f"{kv} KV cache")
        bits.append(f"{need / GIB:.1f} of {budget.ram / GIB:.1f} GiB ({share:.0%})")
        return "tight", "; ".join(bits)
    return "fits", (f"{d['n_ctx']} tokens, f16 KV, {d['n_gpu_layers']} GPU layers: "
                    f"{need / GIB:.1f} of {budget.ram / GIB:.1f} GiB")


def fit_files(files: list[QuantFile], budget: Budget, *, min_ctx: int = 4096, target_ctx: int = 4096,
              n_batch: int = 512, on_fit: Callable[[Fit], None] | None = None, machine: Machine | None = None,
              calibrate: bool = False, profile: str = "window",
              speed_profile: speed.SpeedProfile | None = None) -> list[Fit]:
    """A Fit per file (``on_fit`` is called as each is known) and the recommended one marked. Each is planned by
    ``planner.plan_facts`` as the file would be once downloaded: for ``machine`` (its CPU features: weight
    repacking), for front end ``profile``, with the dry run its header has had (``calibrate``: made now where
    missing, seconds per file), so the badge says what the planner page and the load will say."""
    fits: list[Fit] = []
    facts_of: dict[str, ModelFacts] = {}
    projectors: dict[str, Any] = {}  # a repository's projector, read once for all its models
    opts = _options(budget, machine, min_ctx=min_ctx, n_batch=n_batch, profile=profile, calibrate=calibrate,
                    speed=speed.load_profile() if speed_profile is None else speed_profile)
    for f in files:
        try:
            facts, nbytes = file_facts(f)
        except GatedRepo:  # no file of the repository can be read without a token: one answer, for the repo
            raise gated(f.repo) from None
        except HubError as exc:
            fit = Fit(f, "unknown", str(exc))
        else:
            facts_of[f.name] = facts
            p = _plan([facts], target_ctx, opts, vision=_projector_cost(f, projectors))
            v, why = verdict(p, budget, min(target_ctx, facts.context_length or target_ctx))
            fast = speed.for_model(facts, opts["speed"])
            if fast is not None and v != "wont_fit":
                why = f"{fast.label()}; {why}"
            fit = Fit(f, v, why, p.to_dict(), header_bytes=nbytes, params=facts.n_params,
                      speed=fast.to_dict() if fast is not None else None)
        fits.append(fit)
        if on_fit is not None:
            on_fit(fit)
    recommend(fits, facts_of, budget, target_ctx=target_ctx, opts=opts)
    return fits


def _options(budget: Budget, machine: Machine | None, **kw: Any) -> dict[str, Any]:
    from hisho.core.machine import Machine as MachineType

    m = machine or MachineType(platform="linux", ram_total=budget.ram, ram_available=budget.ram, cpu_threads=1)
    return {"budget": budget, "machine": m, **kw}


def _projector_cost(f: QuantFile, seen: dict[str, Any]) -> Any:
    """The planner's ``VisionCost`` of ``f``'s projector from its header (by ranges, once per projector); None
    for a text-only file or an unreadable header (logged: the download checks it again)."""
    from hisho.core.errors import UserError
    from hisho.core.hub.projector import hub_projector_facts
    from hisho.core.planner.vision import cost_of

    if not f.mmproj:
        return None
    if f.mmproj not in seen:
        try:
            seen[f.mmproj] = cost_of(hub_projector_facts(f.repo, f.mmproj, f.revision), f.mmproj)
        except UserError as exc:
            log.warning("projector %s of %s not counted: %s", f.mmproj, f.repo, exc)
            seen[f.mmproj] = None
    return seen[f.mmproj]


def _plan(facts: list[ModelFacts], target_ctx: int, opts: dict[str, Any], vision: Any = None) -> Any:
    from hisho.core import planner

    ctx = min(target_ctx, max(f.context_length or target_ctx for f in facts))
    return planner.plan_facts(facts, opts["machine"], opts["budget"], min_ctx=min(opts["min_ctx"], ctx),
                              target_ctx=target_ctx, calibrate_missing=opts["calibrate"], n_batch=opts["n_batch"],
                              n_ubatch=opts["n_batch"], profile=opts["profile"], vision=vision)


def recommend(fits: list[Fit], facts_of: dict[str, ModelFacts], budget: Budget, *, target_ctx: int,
              opts: dict[str, Any]) -> Fit | None:
    """Mark the planner's choice among all files; its ``why`` becomes the one-line reason."""
    known = [f for f in fits if f.file.name in facts_of]
    if not known:
        return None
    quick = [f for f in known if f.fast_enough and f.verdict != "wont_fit"]
    slow = [f for f in known if not f.fast_enough and f.verdict != "wont_fit"]
    if quick and slow:  # the best quality among the files that answer fast enough here
        known = quick
    p = _plan([facts_of[f.file.name] for f in known], target_ctx, opts)
    chosen = next((f for f in known if p.facts is not None and facts_of[f.file.name] is p.facts), None)
    if chosen is None or not p.fits:
        smallest = min(known, key=lambda f: f.file.size)
        smallest.recommended = True
        smallest.why = f"nothing in this repository fits; the smallest file is the closest ({smallest.why})"
        return smallest
    chosen.recommended = True
    chosen.why = f"best quality that fits this machine ({chosen.why})"
    if quick and slow:
        chosen.why = (f"best quality that fits this machine and answers at {SPEED_FLOOR:.0f} tok/s or faster "
                      f"({chosen.why}); {len(slow)} larger file(s) fit but would be slower")
    elif slow and not quick:
        chosen.why += f"; slower here than {SPEED_FLOOR:.0f} tok/s"
    return chosen
