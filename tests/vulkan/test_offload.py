"""Full, partial and no offload of the bundled model on the Vulkan device: where llama.cpp really put the
weights, the KV cache and the compute buffers (the buffer lines of a real load, ``probe measure``), against
what the planner says, and greedy replies through the engine process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner.calibrate import run_probe
from hisho.core.planner.layout import Config
from hisho.core.planner.memory import gpu_layers, memory_bytes, weights_split

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=8, ignore_eos=True)
N_CTX = 512


@pytest.fixture(scope="module")
def facts(default_model_path: Path) -> ModelFacts:
    return read_facts(str(default_model_path))


def measured(model: Path, n_gpu_layers: int) -> dict[str, Any]:
    """A real load in a probe process, its context filled once: the buffers llama.cpp reported."""
    params = LoadParams(model_path=str(model), n_ctx=N_CTX, n_gpu_layers=n_gpu_layers)
    answer = run_probe("measure", {"params": params.to_dict(), "fill": "decode"}, timeout=300)
    buffers: dict[str, Any] = answer["buffers"]
    return buffers


def on(buffers: dict[str, Any], kind: str, dev: str) -> int:
    return int(buffers[kind].get(dev, 0))


def near(got: int, want: int, slack: int = 1 << 20) -> bool:
    """Buffer lines print MiB with two decimals (10 KiB steps) and pad to the backend's alignment."""
    return abs(got - want) <= slack


def test_full_offload_puts_every_layer_and_the_whole_cache_on_the_device(
        default_model_path: Path, facts: ModelFacts, device: dict[str, Any]) -> None:
    b = measured(default_model_path, facts.n_layer + 1)
    dev = device["name"]
    _ram, gpu = weights_split(facts, facts.n_layer + 1)
    assert near(on(b, "model", dev), gpu), b["model"]
    assert near(on(b, "KV", dev), memory_bytes(facts, Config(n_ctx=N_CTX))), b["KV"]
    assert on(b, "KV", "CPU") == 0
    assert on(b, "compute", dev) > 0


def test_partial_offload_splits_weights_and_cache_as_the_planner_says(
        default_model_path: Path, facts: ModelFacts, device: dict[str, Any]) -> None:
    half = facts.n_layer // 2
    b = measured(default_model_path, half)
    dev = device["name"]
    _ram, gpu = weights_split(facts, half)
    assert near(on(b, "model", dev), gpu), b["model"]
    cfg = Config(n_ctx=N_CTX)
    on_device = memory_bytes(facts, cfg, gpu_layers(facts, half).start)  # the output layer counts as one
    assert near(on(b, "KV", dev), on_device), b["KV"]
    assert near(on(b, "KV", "CPU"), memory_bytes(facts, cfg) - on_device), b["KV"]


def test_no_offload_keeps_weights_and_cache_in_ram(default_model_path: Path, facts: ModelFacts,
                                                   device: dict[str, Any]) -> None:
    b = measured(default_model_path, 0)
    dev = device["name"]
    assert on(b, "model", dev) == 0 and on(b, "KV", dev) == 0
    assert near(on(b, "KV", "CPU"), memory_bytes(facts, Config(n_ctx=N_CTX))), b["KV"]


@pytest.fixture(scope="module")
def full_engine(vulkan_env: None, engine_home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient()
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_gpu_layers=99, n_threads=1))
    yield client
    client.close()
    mp.undo()


@pytest.fixture(scope="module")
def engine_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine_home")


def test_full_offload_replies_and_repeats_itself_exactly(full_engine: EngineClient) -> None:
    prompt = full_engine.tokenize(messages=[{"role": "user", "content": "Name three colours of the rainbow."}])
    first = [int(ev["token"]) for ev in full_engine.generate(tokens=prompt, sampling=GREEDY)]
    full_engine.seq_rm(0)
    again = [int(ev["token"]) for ev in full_engine.generate(tokens=prompt, sampling=GREEDY)]
    assert len(first) == GREEDY.max_tokens
    assert again == first  # Vulkan to Vulkan: the same device, the same batches, the same tokens
    assert full_engine.detokenize(first).strip()
