"""From "the user wants model X" to the ``LoadParams`` the engine gets. One place, used by CLI and GUI.

A model's own choice (settings ``model_choices``: the planner page's "Use this context") decides n_ctx and the
KV type, else the settings' defaults (the context capped at what the model was trained on); the memory planner (hisho.core.planner.gate) picks GPU layers when the
setting says so and refuses a load it says will not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hisho.core import settings as settings_mod
from hisho.core.engine.protocol import LoadParams
from hisho.core.models.projector import projector_for
from hisho.core.models.store import ModelStore

if TYPE_CHECKING:
    from hisho.core.machine import Machine
    from hisho.core.planner.search import Plan


def open_model(name_or_path: str | None, store: ModelStore) -> Path:
    """Resolve a store name or path (None: the default model) to a validated GGUF path, in registry ``store``
    (the root's, ``Services.models``)."""
    return store.resolve(name_or_path)


def load_params_for(model_path: Path, *, n_ctx: int | None = None, n_seq_max: int = 1,
                    settings: settings_mod.Settings | None = None, override: bool = False,
                    kv_unified: bool = True, saves_kv: bool = False) -> LoadParams:
    """``planned_load`` without the plan."""
    return planned_load(model_path, n_ctx=n_ctx, n_seq_max=n_seq_max, settings=settings, override=override,
                        kv_unified=kv_unified, saves_kv=saves_kv)[0]


def planned_load(model_path: Path, *, n_ctx: int | None = None, n_seq_max: int = 1,
                 settings: settings_mod.Settings | None = None, override: bool = False,
                 kv_unified: bool = True, saves_kv: bool = False,
                 machine: Machine | None = None) -> tuple[LoadParams, Plan | None]:
    """Settings' parameters, checked by the memory planner (which also picks GPU layers when the setting is
    -1; ``saves_kv``: this front end saves KV, so the plan counts the save buffers). Raises planner.gate.PlanRefused (a UserError) if the plan says the load will not fit, unless
    ``override``: then it only logs a warning."""
    from hisho.core.planner.gate import planned

    s = settings or settings_mod.load()
    own = s.choice_for(model_path)
    kv = str(own.get("kv_type") or s["kv_type"])
    flash = bool(s["flash_attn"]) or kv != "f16"  # quantized V needs flash attention
    params = LoadParams(
        model_path=str(model_path),
        n_ctx=int(n_ctx or chosen_ctx(model_path, s)),
        n_batch=int(s["n_batch"]),
        n_ubatch=int(s["n_batch"]),
        n_threads=int(s["n_threads"]),
        n_gpu_layers=max(0, int(s["n_gpu_layers"])),
        flash_attn=flash,
        type_k=kv,
        type_v=kv,
        n_seq_max=n_seq_max,
        kv_unified=kv_unified,  # one stream per sequence holds a window per sequence: the plan must know
        mmproj_path=str(projector_for(model_path) or ""),  # a projector beside the model: it reads images
    )
    return planned(params, want_gpu_layers=int(s["n_gpu_layers"]), override=override, saves_kv=saves_kv,
                   machine=machine)


def chosen_ctx(model_path: str | Path, settings: settings_mod.Settings) -> int:
    """The context a model loads with unless a front end names one: its own choice (settings ``model_choices``,
    the planner page's "Use this context"), else ``default_ctx``. ``hisho serve`` takes it per request, the
    window for its chats."""
    own = settings.choice_for(model_path).get("n_ctx")
    return int(own) if own else default_ctx(model_path, int(settings["n_ctx"]))


def default_ctx(model_path: str | Path, n_ctx: int) -> int:
    """The context of a model without its own choice: the settings' ``n_ctx``, never above what the model was
    trained on (a longer one is the user's choice for that model, made with a warning on the planner page)."""
    from hisho.core.errors import UserError
    from hisho.core.models.gguf_facts import read_facts

    try:
        trained = read_facts(model_path).context_length
    except UserError:
        return n_ctx  # the load reports a bad file itself
    return min(n_ctx, trained) if trained > 0 else n_ctx
