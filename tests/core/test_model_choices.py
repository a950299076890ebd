"""Context and KV type are chosen per model: the planner's "Use this context" for model A leaves model B's load
unchanged; a model without a choice loads at the settings' context capped at what it was trained on; a version-1
settings file upgrades; each front end's load is priced for its own profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisho.core import paths, services
from hisho.core import settings as settings_mod
from hisho.core.machine import Machine
from hisho.core.planner.launch import load_params_for, planned_load
from hisho.core.planner.profiles import SHAPES
from tests.fixtures.gguf_shapes import TINY_LLAMA, write_shape

GIB = 1024**3
MACHINE = Machine(platform="linux", ram_total=16 * GIB, ram_available=16 * GIB, cpu_threads=2)


def test_one_models_choice_leaves_another_unchanged(tmp_path: Path, default_model_path: Path) -> None:
    other = write_shape(tmp_path / "other.gguf", TINY_LLAMA)
    s = settings_mod.Settings(path=paths.settings_path())
    s.choose(other, n_ctx=2048, kv_type="q8_0")
    s.save()
    again = settings_mod.load()
    assert again.choice_for(other) == {"n_ctx": 2048, "kv_type": "q8_0"}
    assert again.choice_for(default_model_path) == {}
    a = load_params_for(other, settings=again)
    b = load_params_for(default_model_path, settings=again)
    assert (a.n_ctx, a.type_k, a.type_v, a.flash_attn) == (2048, "q8_0", "q8_0", True)
    assert (b.n_ctx, b.type_k) == (4096, "f16")  # the defaults, untouched by the other model's choice


def test_a_default_context_never_exceeds_the_trained_one(default_model_path: Path) -> None:
    s = settings_mod.Settings()
    s.set("n_ctx", 32768)  # chosen for a 32K model once; the bundled one was trained on 8,192
    assert load_params_for(default_model_path, settings=s).n_ctx == 8192
    s.choose(default_model_path, n_ctx=16384, kv_type="f16")  # its own choice, past it: allowed (with a warning)
    assert load_params_for(default_model_path, settings=s).n_ctx == 16384
    assert load_params_for(default_model_path, settings=s, n_ctx=1024).n_ctx == 1024  # a front end's own wins


def test_choices_are_checked() -> None:
    s = settings_mod.Settings()
    with pytest.raises(ValueError, match="KV type"):
        s.set("model_choices", {"/m.gguf": {"kv_type": "q2"}})
    with pytest.raises(ValueError, match="context"):
        s.set("model_choices", {"/m.gguf": {"n_ctx": 10}})
    assert settings_mod.Settings({"model_choices": {"/m.gguf": {"n_ctx": "x"}}})["model_choices"] == {}


def test_version_1_settings_upgrade_with_no_choices_and_keep_their_defaults() -> None:
    paths.settings_path().write_text(json.dumps({"schema_version": 1, "n_ctx": 8192, "kv_type": "q8_0"}))
    s = settings_mod.load()
    assert s["n_ctx"] == 8192 and s["kv_type"] == "q8_0" and s["model_choices"] == {}
    s.save()
    assert json.loads(paths.settings_path().read_text())["schema_version"] == settings_mod.SCHEMA_VERSION == 2


def test_planner_profiles_are_the_front_ends_profiles() -> None:
    for name, profile in services.PROFILES.items():
        shape = SHAPES[name]
        assert (shape.n_seq_max, shape.kv_unified, shape.saves_kv) == \
            (profile.n_seq_max, profile.kv_unified, profile.kv), name
    from hisho.cli.plan import PLAN_PROFILES as cli
    from hisho.core.planner.profiles import PLAN_PROFILES

    assert cli == PLAN_PROFILES


def test_each_front_end_is_priced_for_its_own_profile(default_model_path: Path) -> None:
    """The window keeps a save buffer and two sequences; ``generate`` keeps nothing: the same file at the same
    context needs more in the window, and each load is judged by its own figure."""
    s = settings_mod.Settings()
    figures = {}
    for name in ("window", "generate"):
        shape = SHAPES[name]
        _params, plan = planned_load(default_model_path, settings=s, n_seq_max=shape.n_seq_max,
                                     kv_unified=shape.kv_unified, saves_kv=shape.saves_kv, machine=MACHINE)
        assert plan is not None
        figures[name] = plan.need
    assert figures["window"] > figures["generate"]


def test_hisho_plan_warns_past_the_trained_context(default_model_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A context past the trained one is planned as asked, never silently cut, and said with the file's rope
    scaling; a model's own choice past it (made on the planner page) is planned and warned about the same way."""
    from hisho.cli.main import main

    assert main(["plan", "--ctx", "16384", "--no-calibrate", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_ctx"] == 16384
    assert d["warning"].startswith("⚠ Longer than the 8,192 tokens this model was trained on")
    assert "no rope scaling" in d["warning"]  # SmolLM2's file declares none
    assert main(["plan", "--ctx", "4096", "--no-calibrate"]) == 0
    assert "WARNING" not in capsys.readouterr().out
    s = settings_mod.Settings(path=paths.settings_path())
    s.choose(default_model_path, n_ctx=12288, kv_type="f16")
    s.save()
    assert main(["plan", "--no-calibrate"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("WARNING    ⚠ Longer than the 8,192 tokens") and "n_ctx 12288" in text
    # serve: 4 sequences of 4,096 each are within it, whatever the total
    assert main(["plan", "--profile", "serve", "--parallel", "4", "--ctx", "16384", "--no-calibrate", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_ctx"] == 16384 and "warning" not in d
