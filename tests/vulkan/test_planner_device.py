"""The planner's device path on a real Vulkan device: what it reads (memory, budget, type), the layers it plans
against it, what ``hisho plan --json`` says, and the device compute buffer it counts against the one llama.cpp
reserves. What lavapipe cannot show (unified memory, a driver's budget, the igpu type) is covered by recorded
fixtures of real devices in tests/core (test_planner_device.py, beside the lavapipe fixture recorded here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hisho.core import machine as machine_mod
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner import calibration_for, make_plan
from hisho.core.planner.calibrate import run_probe
from hisho.core.planner.memory import Config, estimate, gpu_layers, memory_bytes, weights_split


def test_the_planner_reads_the_device_llama_cpp_sees(device: dict[str, Any]) -> None:
    m = machine_mod.detect()
    assert m.supports_gpu_offload
    dev = m.gpus[0]
    assert (dev.name, dev.type, dev.total) == (device["name"], device["type"], device["total"])
    assert 0 < dev.free <= dev.total  # a driver without a memory budget reports free == total
    budget = m.budget()
    assert budget.unified == (dev.type == "igpu")
    assert budget.gpu == (min(dev.free, dev.total) if dev.type == "gpu" else budget.gpu)
    assert 0 < budget.gpu <= dev.total


def test_plan_offloads_the_bundled_model_and_says_where(device: dict[str, Any], default_model_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from hisho.cli.main import main

    assert main(["plan", "--json", str(default_model_path)]) == 0
    d = json.loads(capsys.readouterr().out)
    facts = read_facts(str(default_model_path))
    assert d["fits"]
    assert d["device"]["name"] == device["name"] and d["device"]["type"] == device["type"]
    assert d["device"]["total_bytes"] == device["total"]
    split = d["layer_split"]
    # 135M parameters fit a 2 GiB device whole: every repeating layer and the output layer.
    assert split == {"gpu": facts.n_layer + 1, "cpu": 0, "total": facts.n_layer + 1}
    assert d["n_gpu_layers"] == facts.n_layer + 1
    assert 0 < d["gpu_bytes"] <= d["gpu_budget_bytes"]


def test_a_smaller_device_gets_a_partial_split(device: dict[str, Any], default_model_path: Path) -> None:
    facts = read_facts(str(default_model_path))
    m = machine_mod.detect()
    full = estimate(facts, Config(n_ctx=4096, n_gpu_layers=facts.n_layer + 1), calibration_for(facts))
    budget = m.budget(gpu=full.gpu * 2 // 3)
    p = make_plan([str(default_model_path)], m, budget)
    assert p.fits and 0 < p.config.n_gpu_layers < facts.n_layer + 1
    assert p.breakdown.gpu <= budget.gpu


@pytest.mark.parametrize("offloaded", ["none", "all"])
def test_the_device_compute_buffer_is_what_llama_cpp_reserves(offloaded: str, device: dict[str, Any],
                                                               default_model_path: Path) -> None:
    """The planner's device compute buffer (the device share of the plan beyond weights and KV) against the one
    a dry run of this build reserves on the device, with the engine's own context parameters: nothing with no
    layer offloaded (prompt offload off), the whole graph's buffer with every layer offloaded."""
    facts = read_facts(str(default_model_path))
    ngl = 0 if offloaded == "none" else facts.n_layer + 1
    contexts = [{"n_ctx": 4096, "n_batch": 512, "n_ubatch": 512, "flash_attn": True, "type_k": "f16",
                 "type_v": "f16"}]
    answer = run_probe("dry-run", {"model_path": str(default_model_path), "contexts": contexts,
                                   "touched": False, "n_gpu_layers": ngl}, timeout=120)
    reserved = int(answer["contexts"][0]["compute"].get(device["name"], 0))
    cfg = Config(n_ctx=4096, n_gpu_layers=ngl)
    b = estimate(facts, cfg, calibration_for(facts))
    gpu_w = weights_split(facts, ngl)[1]
    gpu_kv = memory_bytes(facts, cfg, gpu_layers(facts, ngl).start) if ngl else 0
    assert b.gpu - gpu_w - gpu_kv == reserved
