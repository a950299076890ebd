"""Prompt offload with a partial offload, decided by the engine's probe on the Vulkan device (docs/vulkan.md):
on lavapipe the "device" is the CPU's own cores running shaders, so the probe finds it slower and the engine
loads with prompt offload off; the answer is kept, the planner puts it into the next load of that split, and a
load that does not carry it takes the kept one without measuring again. What the rule decides from the
timings is tested without a device (tests/core/test_prompt_offload_rule.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner.gate import planned

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=4, ignore_eos=True)


def test_the_probe_turns_prompt_offload_off_on_lavapipe_and_is_kept(default_model_path: Path,
                                                                    device: dict[str, Any]) -> None:
    layers = read_facts(str(default_model_path)).n_layer // 2
    params = LoadParams(model_path=str(default_model_path), n_ctx=512, n_gpu_layers=layers)
    with EngineClient() as client:
        info = client.load(params)
        probe = info["offload_probe"]
        assert probe is not None and not probe["kept"]
        assert min(probe["on_s"]) > min(probe["off_s"])  # shaders on the CPU's cores read the batch slower
        assert probe["chosen"] is False and info["op_offload"] is False
        assert client.generate(prompt="The lighthouse", sampling=GREEDY).collect().completion_tokens == 4

        # The next plan of this split carries the answer; a load without it takes the kept one, unmeasured.
        assert planned(params, want_gpu_layers=layers)[0].op_offload is False
        again = client.load(params)
        assert again["offload_probe"]["kept"] and again["offload_probe"]["on_s"] == probe["on_s"]
        assert again["op_offload"] is False

        # No layer offloaded: off by the rule, nothing measured.
        none = client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        assert none["op_offload"] is False and none["offload_probe"] is None
