"""Prompt offload (llama.cpp's ``op_offload``) is decided from the load, never left at llama.cpp's default:
off with no layer offloaded; with layers offloaded, as the load says (a partial offload's probe,
hisho.core.planner.offload), else on (docs/vulkan.md). On a CPU build the flag changes nothing, so this checks
the rule, that the context parameters carry it and that a CPU build never runs the probe; the Vulkan suite
measures what it changes."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.engine.lib.llama_setup import context_params, model_params, prompt_offload
from hisho.engine.model import offload


def test_llama_cpp_default_would_offload_prompts() -> None:
    assert llama_cpp.llama_context_default_params().op_offload  # what the engine must not inherit


@pytest.mark.parametrize(("layers", "decided", "offload_on"), [
    (0, None, False), (0, True, False),      # nothing on the device: off, whatever else is said
    (1, None, True), (15, None, True), (99, None, True),  # undecided: llama.cpp's choice
    (15, False, False), (15, True, True),    # a partial offload's probe decided it
])
def test_prompt_offload_follows_the_load(layers: int, decided: bool | None, offload_on: bool) -> None:
    params = LoadParams(model_path="unused.gguf", n_gpu_layers=layers, op_offload=decided)
    assert prompt_offload(params) is offload_on
    assert bool(context_params(params).op_offload) is offload_on


def test_a_cpu_build_never_probes(default_model_path: Path) -> None:
    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("a GPU build: the Vulkan suite covers the probe")
    params = LoadParams(model_path=str(default_model_path), n_ctx=256, n_gpu_layers=10)
    model = llama_cpp.llama_model_load_from_file(params.model_path.encode("utf-8"), model_params(params, True))
    try:
        assert offload.decide(model, params) == (params, None)
    finally:
        llama_cpp.llama_model_free(model)
