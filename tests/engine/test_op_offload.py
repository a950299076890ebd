"""Prompt offload (llama.cpp's ``op_offload``) is decided from the load, never left at llama.cpp's default:
off with no layer offloaded, on with layers offloaded (docs/vulkan.md). On a CPU build the flag changes nothing,
so this checks the rule and that the context parameters carry it; the Vulkan suite measures what it changes."""

from __future__ import annotations

import llama_cpp
import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.engine.lib.llama_setup import context_params, prompt_offload


def test_llama_cpp_default_would_offload_prompts() -> None:
    assert llama_cpp.llama_context_default_params().op_offload  # what the engine must not inherit


@pytest.mark.parametrize(("layers", "offload"), [(0, False), (1, True), (15, True), (99, True)])
def test_prompt_offload_follows_the_offloaded_layers(layers: int, offload: bool) -> None:
    params = LoadParams(model_path="unused.gguf", n_gpu_layers=layers)
    assert prompt_offload(params) is offload
    assert bool(context_params(params).op_offload) is offload
