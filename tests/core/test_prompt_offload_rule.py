"""Prompt offload with a partial offload (hisho.core.planner.offload): the rule that turns the probe's timings
into a choice, when the timings settle it, and the kept answer the planner puts into the next load of the same
split. The probe itself runs on a Vulkan device (tests/vulkan/test_prompt_offload.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import from_fixture
from hisho.core.planner import offload
from hisho.core.planner.calibrate import library_version
from hisho.core.planner.gate import planned

DEVICES = Path(__file__).resolve().parents[1] / "fixtures" / "devices"


@pytest.mark.parametrize(("on_s", "off_s", "wins"), [
    ([1.0], [2.0], True),            # the device reads the batch twice as fast
    ([1.0], [1.1], False),           # faster, but inside the margin: the CPU keeps it
    ([1.0], [offload.MARGIN], True),
    ([4.0], [1.0], False),           # a software device: four times slower
    ([3.0, 1.0], [1.5, 1.4], True),  # the best time of each counts (the first included pipeline builds)
    ([], [1.0], False),
])
def test_the_device_must_win_by_the_margin(on_s: list[float], off_s: list[float], wins: bool) -> None:
    assert offload.device_wins(on_s, off_s) is wins
    assert offload.OffloadProbe(on_s=on_s, off_s=off_s, n_tokens=64).chosen is wins


@pytest.mark.parametrize(("on_s", "off_s", "done"), [
    ([4.0], [1.0], True),        # one pair, one side far ahead
    ([1.0], [2.0], True),
    ([1.0], [1.2], False),       # close: a second pair
    ([1.0, 1.1], [1.2, 1.0], True),
    ([1.0], [], False),
])
def test_a_close_first_pair_asks_for_a_second(on_s: list[float], off_s: list[float], done: bool) -> None:
    assert offload.settled(on_s, off_s) is done


@pytest.mark.parametrize(("layers", "is_partial"), [(0, False), (1, True), (30, True), (31, False), (99, False)])
def test_partial_counts_the_output_layer(layers: int, is_partial: bool) -> None:
    assert offload.partial(layers, n_layer=30) is is_partial


def test_a_kept_probe_is_found_only_for_its_split(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    probe = offload.OffloadProbe(on_s=[4.0], off_s=[1.0], n_tokens=64)
    dev = [offload.device_key("Vulkan0", "llvmpipe")]
    offload.remember(str(model), 15, dev, "lib (vulkan)", probe)
    assert offload.recall(str(model), 15, dev, "lib (vulkan)") == probe
    assert offload.recall(str(model), 16, dev, "lib (vulkan)") is None
    assert offload.recall(str(model), 15, [offload.device_key("Vulkan0", "Intel Arc")], "lib (vulkan)") is None
    assert offload.recall(str(model), 15, dev, "another build") is None
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file changed: measured again
    assert offload.recall(str(model), 15, dev, "lib (vulkan)") is None


def test_an_unreadable_kept_probe_is_measured_again(tmp_path: Path) -> None:
    path = offload.cache_path("m.gguf", 3, [], "lib")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json", encoding="utf-8")
    assert offload.recall("m.gguf", 3, [], "lib") is None


def test_the_plan_puts_the_kept_choice_into_a_partial_load(default_model_path: Path) -> None:
    machine = from_fixture(DEVICES / "linux_lavapipe.json")
    devices = [offload.device_key(d.name, d.description) for d in machine.gpus]
    params = LoadParams(model_path=str(default_model_path), n_ctx=2048, n_gpu_layers=10)
    assert planned(params, want_gpu_layers=10, machine=machine)[0].op_offload is None  # not measured yet
    for chosen, timings in ((False, ([4.0], [1.0])), (True, ([1.0], [4.0]))):
        offload.remember(str(default_model_path), 10, devices, library_version(),
                         offload.OffloadProbe(on_s=timings[0], off_s=timings[1], n_tokens=64))
        assert planned(params, want_gpu_layers=10, machine=machine)[0].op_offload is chosen
    # No layer offloaded: never probed, never kept; the engine turns prompt offload off by its rule.
    none = LoadParams(model_path=str(default_model_path), n_ctx=2048)
    assert planned(none, want_gpu_layers=0, machine=machine)[0].op_offload is None
