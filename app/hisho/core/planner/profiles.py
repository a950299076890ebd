"""What each front end's load holds, for the planner: a plan is for a profile.

The window keeps two sequences (one is the scratch of a KV save) and saves conversations' KV (a save arena);
``hisho generate`` and ``hisho summarize`` load one sequence and keep nothing; ``hisho serve --parallel N``
loads N sequences, one KV stream each, and saves KV. The same file at the same context needs different memory in
each, so ``hisho plan --profile``, the window's planner and each front end's own load (``launch.load_params_for``
through ``gate.apply_plan``) price the profile they run. ``core/services.py:PROFILES`` names the same front ends
for the composition root; a test checks that the two tables agree.

``requested`` builds the configuration a load asks for from settings (before the load rules of
``search.as_loaded``: flash attention off at long context, repacking, mmap), so the hub's header, the file on
disk and the loaded model are all priced from the same request.
"""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.planner.layout import Config


@dataclass(frozen=True)
class LoadShape:
    """The memory-relevant part of a front end's load."""

    name: str
    n_seq_max: int
    kv_unified: bool
    saves_kv: bool


SHAPES: dict[str, LoadShape] = {s.name: s for s in (
    LoadShape("window", n_seq_max=2, kv_unified=True, saves_kv=True),
    LoadShape("chat", n_seq_max=2, kv_unified=True, saves_kv=True),
    LoadShape("generate", n_seq_max=1, kv_unified=True, saves_kv=False),
    LoadShape("summarize", n_seq_max=1, kv_unified=True, saves_kv=False),
    LoadShape("serve", n_seq_max=1, kv_unified=False, saves_kv=True),
)}
PLAN_PROFILES = ("window", "serve", "generate", "summarize")  # what ``hisho plan --profile`` offers


def shape(name: str, parallel: int | None = None) -> LoadShape:
    """The load shape of front end ``name``; ``parallel``: ``serve``'s sequences (``--parallel``)."""
    try:
        s = SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(SHAPES)}") from None
    if parallel is not None and name == "serve":
        s = LoadShape(s.name, max(1, parallel), s.kv_unified, s.saves_kv)
    return s


def requested(load: LoadShape, *, n_ctx: int, kv_type: str, n_batch: int = 512, flash_attn: bool = True) -> Config:
    """The configuration a load of ``load`` asks for at ``n_ctx`` tokens of ``kv_type`` KV with the settings'
    ``n_batch`` (the ubatch too) and ``flash_attn``, as ``launch.load_params_for`` builds it: a quantized V
    cache needs flash attention (llama.cpp)."""
    return Config(n_ctx=n_ctx, type_k=kv_type, type_v=kv_type, flash_attn=flash_attn or kv_type != "f16",
                  n_batch=n_batch, n_ubatch=n_batch, n_seq_max=load.n_seq_max, kv_unified=load.kv_unified,
                  saves_kv=load.saves_kv)
