"""The planner's device facts from recorded devices: Mesa's software Vulkan device (lavapipe, what CI's Vulkan
suite runs on) beside real iGPUs, whose unified memory, driver budget and igpu type lavapipe cannot show; and
the device compute buffer a GPU build's dry run reports (tests/vulkan checks it against llama.cpp itself)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hisho.core.machine import from_fixture
from hisho.core.planner import plan
from hisho.core.planner.calibrate import calibration_from_probe, on_device
from hisho.core.planner.memory import Config, estimate, memory_bytes, weights_split
from tests.core.test_planner import smollm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "devices"
GIB, MIB = 1024**3, 1024**2


def test_lavapipe_is_a_gpu_with_its_own_heap_and_no_budget() -> None:
    m = from_fixture(FIX / "linux_lavapipe.json")
    dev = m.gpus[0]
    assert dev.type == "gpu" and not m.unified  # ggml types it gpu, not igpu, though it is the CPU's RAM
    assert dev.free == dev.total == 2 * GIB     # no memory budget: free is the heap's size
    b = m.budget()
    assert b.gpu == 2 * GIB and not b.unified


def test_the_same_model_on_lavapipe_and_on_an_igpu() -> None:
    facts, calib = smollm()
    lava = from_fixture(FIX / "linux_lavapipe.json").budget()
    igpu = from_fixture(FIX / "windows_igpu.json").budget()
    on_lava = plan([facts], lava, calibration=lambda _f: calib)
    on_igpu = plan([facts], igpu, calibration=lambda _f: calib)
    for p in (on_lava, on_igpu):
        assert p.fits and p.config.n_gpu_layers == facts.n_layer + 1
        assert p.layer_split() == {"gpu": facts.n_layer + 1, "cpu": 0, "total": facts.n_layer + 1}
    assert on_igpu.budget.unified and not on_lava.budget.unified
    # An iGPU's share comes out of the one pool; the driver's free figure (9 GiB of 8) was clamped.
    assert on_igpu.need <= igpu.ram and on_igpu.breakdown.gpu <= igpu.gpu <= 8 * GIB


def test_a_device_smaller_than_the_model_gets_some_layers() -> None:
    facts, calib = smollm()
    lava = from_fixture(FIX / "linux_lavapipe.json")
    full = estimate(facts, Config(n_ctx=4096, n_gpu_layers=facts.n_layer + 1), calib)
    p = plan([facts], lava.budget(gpu=full.gpu * 2 // 3), calibration=lambda _f: calib)
    assert p.fits and 0 < p.config.n_gpu_layers < facts.n_layer + 1
    assert p.breakdown.gpu <= full.gpu * 2 // 3


def vulkan_dry_run(device_bytes: int) -> dict[str, object]:
    """A Vulkan build's dry-run answer for one context, shaped as the probe writes it (measured on lavapipe:
    the CPU's compute buffer is pinned host memory, "Vulkan_Host")."""
    return {"supports_gpu_offload": True, "model_anon": 0, "model_file": 0, "library": "llama-cpp-python (vulkan)",
            "contexts": [{"ok": True, "anon": 0, "file": 0,
                          "config": {"n_ctx": 4096, "flash_attn": True, "type_k": "f16", "type_v": "f16"},
                          "kv_caches": [{"bytes": 94371840, "cells": 4096, "layers": 30}],
                          "compute": {"Vulkan0": device_bytes, "Vulkan_Host": 103022592},
                          "output": {"CPU": 199229}}]}


def test_buffer_names_on_the_device_and_in_ram() -> None:
    assert on_device("Vulkan0") and on_device("CUDA1")
    assert not any(on_device(n) for n in ("CPU", "CPU_REPACK", "Vulkan_Host", "CUDA_Host"))


def test_the_device_compute_buffer_at_zero_layers_is_the_dry_runs() -> None:
    facts, cpu_calib = smollm()
    cfg = Config(n_ctx=4096)
    # A CPU build's calibration: nothing on a device.
    assert estimate(facts, cfg, cpu_calib).gpu == 0
    # llama.cpp's default prompt offload reserved 127.7 MiB on the device at 0 layers (the engine turns it off,
    # and its own dry run then reports none): whatever the dry run reports is the plan's device share.
    for reserved in (133861212, 0):
        calib = dataclasses.replace(cpu_calib, device_points=calibration_from_probe(
            vulkan_dry_run(reserved), 512).device_points)
        b = estimate(facts, cfg, calib)
        assert b.gpu == reserved
        assert calib.device_lookup(dataclasses.replace(cfg, n_ctx=2048)) == reserved  # the next probed size up


def test_with_layers_offloaded_the_device_holds_the_whole_compute_buffer() -> None:
    facts, calib = smollm()
    cfg = Config(n_ctx=4096, n_gpu_layers=facts.n_layer + 1)
    b = estimate(facts, cfg, calib)
    assert b.gpu == weights_split(facts, cfg.n_gpu_layers)[1] + memory_bytes(facts, cfg) + b.compute
