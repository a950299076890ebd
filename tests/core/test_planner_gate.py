"""The planner at load time: GPU layers from the plan, refusal of a load that will not fit, override."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import from_fixture
from hisho.core.planner.gate import PlanRefused, apply_plan, gpu_backend_present
from hisho.core.planner.launch import load_params_for
from hisho.core.units import GIB
from tests.fixtures.gguf_shapes import LLAMA_31_8B, write_shape

DEVICES = Path(__file__).resolve().parents[1] / "fixtures" / "devices"


@pytest.fixture(scope="module")
def l8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape(tmp_path_factory.mktemp("gate") / "Llama-8B-Q4_K_M.gguf", LLAMA_31_8B)


def test_default_model_loads_as_settings_say(default_model_path: Path) -> None:
    params = load_params_for(default_model_path, n_ctx=2048)
    assert params.n_ctx == 2048 and params.n_gpu_layers == 0 and params.type_k == "f16"


def test_refuses_what_will_not_fit(l8b: Path) -> None:
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    params = LoadParams(model_path=str(l8b), n_ctx=65536)
    with pytest.raises(PlanRefused) as info:
        apply_plan(params, want_gpu_layers=0, machine=laptop)
    message = str(info.value)
    assert "65536 tokens" in message and "would fit" in message and "GiB" in message
    assert not info.value.plan.fits


def test_override_loads_anyway_with_a_warning(l8b: Path, caplog: pytest.LogCaptureFixture) -> None:
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    params = LoadParams(model_path=str(l8b), n_ctx=65536)
    with caplog.at_level(logging.WARNING, logger="hisho.planner"):
        out = apply_plan(params, want_gpu_layers=0, override=True, machine=laptop)
    assert out == params
    assert any("override" in r.getMessage() for r in caplog.records)


def test_plan_picks_gpu_layers(l8b: Path) -> None:
    gpu = from_fixture(DEVICES / "discrete_rtx4060_laptop.json")
    out = apply_plan(LoadParams(model_path=str(l8b), n_ctx=4096), want_gpu_layers=-1, machine=gpu)
    assert out.n_gpu_layers == 33
    # A long context no longer fits the card whole: fewer layers go to the GPU.
    out = apply_plan(LoadParams(model_path=str(l8b), n_ctx=32768), want_gpu_layers=-1, machine=gpu)
    assert 0 < out.n_gpu_layers < 33


def test_fits_on_the_small_laptop(l8b: Path) -> None:
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    params = LoadParams(model_path=str(l8b), n_ctx=4096)
    # Flash attention off: an f16 cache on the CPU whose 4K scores stay small (docs/flash-attention.md).
    assert apply_plan(params, want_gpu_layers=-1, machine=laptop) == dataclasses.replace(params, flash_attn=False)


def test_no_gpu_backend_in_core_tests() -> None:
    # Core tests run with llama_cpp unimportable; a CPU build has no GPU backend library either.
    assert gpu_backend_present() is False


def test_flash_attention_off_where_it_costs_little(default_model_path: Path, l8b: Path) -> None:
    """docs/flash-attention.md: CPU, f16 KV, small extra memory -> off; otherwise as asked."""
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    small = apply_plan(LoadParams(model_path=str(default_model_path), n_ctx=4096), want_gpu_layers=0,
                       machine=laptop)
    assert small.flash_attn is False
    # A quantized V cache needs it.
    q8 = LoadParams(model_path=str(default_model_path), n_ctx=4096, type_k="q8_0", type_v="q8_0")
    assert apply_plan(q8, want_gpu_layers=0, machine=laptop).flash_attn is True
    four = apply_plan(LoadParams(model_path=str(l8b), n_ctx=4096), want_gpu_layers=0, machine=laptop)
    assert not four.flash_attn and four.n_ubatch == 512
    # An 8B's scores at 8K (32 heads, 512 rows: 512 MiB) are over the cap: off with 256-token ubatches; at 16K
    # with 128; at 64K even 64 rows are over it and flash attention stays on.
    eight = apply_plan(LoadParams(model_path=str(l8b), n_ctx=8192), want_gpu_layers=0, machine=laptop)
    assert not eight.flash_attn and eight.n_ubatch == 256 and eight.n_batch == 512
    big = dataclasses.replace(laptop, ram_total=64 * GIB, ram_available=60 * GIB)
    sixteen = apply_plan(LoadParams(model_path=str(l8b), n_ctx=16384), want_gpu_layers=0, machine=big)
    assert not sixteen.flash_attn and sixteen.n_ubatch == 128
    far = apply_plan(LoadParams(model_path=str(l8b), n_ctx=65536), want_gpu_layers=0, machine=big)
    assert far.flash_attn and far.n_ubatch == 512
    # A ubatch the settings made small already is never made larger.
    small_ub = apply_plan(LoadParams(model_path=str(l8b), n_ctx=8192, n_ubatch=128), want_gpu_layers=0,
                          machine=laptop)
    assert not small_ub.flash_attn and small_ub.n_ubatch == 128
    # Nothing on a GPU: its backends have no per-row slow path.
    gpu = from_fixture(DEVICES / "discrete_rtx4060_laptop.json")
    assert apply_plan(LoadParams(model_path=str(l8b), n_ctx=4096), want_gpu_layers=-1, machine=gpu).flash_attn


def test_the_plan_says_flash_attention_as_the_load_sets_it(default_model_path: Path) -> None:
    """`hisho plan` and the planner panel showed "flash attention on" while the load turned it off."""
    from hisho.core.planner import make_plan

    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    shown = make_plan([str(default_model_path)], laptop, laptop.budget(), min_ctx=4096, target_ctx=4096,
                      calibrate_missing=False)
    loaded = apply_plan(LoadParams(model_path=str(default_model_path), n_ctx=shown.config.n_ctx,
                                   type_k=shown.config.type_k, type_v=shown.config.type_v),
                        want_gpu_layers=0, machine=laptop)
    assert shown.fits and shown.config.flash_attn is loaded.flash_attn is False
    assert "flash attention off" in shown.reason and shown.to_dict()["flash_attn"] is False
