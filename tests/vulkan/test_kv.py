"""KV save and restore with layers on the Vulkan device.

- Vulkan to Vulkan: a conversation saved from an offloaded context, restored into a fresh sequence (and a fresh
  engine process), continues token for token as the unsaved run does.
- Across placements: a state saved where the model ran on the CPU (no layer offloaded) is never silently loaded
  into an offloaded context, nor the other way round: the KV fingerprint differs (it names the offload), so the
  index offers nothing, and chunk files handed to the engine anyway are refused by their header.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import StateLoad
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=8, ignore_eos=True)
CHUNK = 64
DOC = " ".join(f"Box {i} is {('red', 'green', 'blue')[i % 3]} and holds {i * 7 % 13} apples." for i in range(14))
HISTORY = [{"role": "user", "content": DOC}, {"role": "assistant", "content": "I have read the list."}]
QUESTION = "What colour is box 5?"


def params(model: Path, n_gpu_layers: int) -> LoadParams:
    # One thread: the comparisons are token for token, and the CPU part's thread split moves last bits.
    return LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2, n_threads=1, n_gpu_layers=n_gpu_layers)


@pytest.fixture(scope="module")
def home(vulkan_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("vk_kv_home")
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def gpu(home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    with EngineClient() as client:
        client.load(params(default_model_path, 99))
        yield client


@pytest.fixture(scope="module")
def cpu(home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    with EngineClient() as client:
        client.load(params(default_model_path, 0))
        yield client


@pytest.fixture
def index(tmp_path: Path) -> KVIndex:
    return KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")


def session(engine: EngineClient, index: KVIndex) -> KVSession:
    return KVSession(engine, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)


def tokens(engine: EngineClient) -> tuple[list[int], list[int]]:
    conv = engine.tokenize(messages=HISTORY, add_generation_prompt=False)
    full = engine.tokenize(messages=[*HISTORY, {"role": "user", "content": QUESTION}])
    assert full[:len(conv)] == conv and len(conv) > 2 * CHUNK
    return conv, full


def answer(engine: EngineClient, full: list[int]) -> tuple[list[int], int]:
    stream = engine.generate(tokens=full, sampling=GREEDY)
    got = [int(ev["token"]) for ev in stream]
    assert stream.result is not None
    return got, stream.result.cached_tokens


def reference(engine: EngineClient, conv: list[int], full: list[int]) -> list[int]:
    """The unsaved run: the conversation prefilled, then the question (as a conversation kept in memory)."""
    engine.seq_rm(0)
    engine.prefill(conv)
    return answer(engine, full)[0]


def save(engine: EngineClient, s: KVSession, conv: list[int]) -> None:
    engine.seq_rm(0)
    engine.prefill(conv)
    s.save("conv:1")
    assert s.flush(300)  # a software device copies the state out slowly under load


def test_offloaded_save_and_restore_continue_exactly(gpu: EngineClient, index: KVIndex,
                                                     default_model_path: Path) -> None:
    conv, full = tokens(gpu)
    want = reference(gpu, conv, full)
    s = session(gpu, index)
    save(gpu, s, conv)
    gpu.seq_rm(0)
    report = s.restore("conv:1", full)
    assert report.restored == len(conv) and report.failed == 0
    assert answer(gpu, full) == (want, len(conv))
    s.close()
    with EngineClient() as fresh:  # a new process: nothing but the files carries the state
        fresh.load(params(default_model_path, 99))
        other = session(fresh, index)
        assert other.restore("conv:1", full).restored == len(conv)
        assert answer(fresh, full)[0] == want
        other.close()


@pytest.mark.parametrize("direction", ["cpu-to-gpu", "gpu-to-cpu"])
def test_a_state_from_the_other_placement_is_refused_by_its_fingerprint(
        direction: str, gpu: EngineClient, cpu: EngineClient, index: KVIndex) -> None:
    saver, loader = (cpu, gpu) if direction == "cpu-to-gpu" else (gpu, cpu)
    conv, full = tokens(saver)
    want = reference(loader, conv, full)
    saved, loading = session(saver, index), session(loader, index)
    save(saver, saved, conv)
    assert saved.fingerprint() != loading.fingerprint()
    loader.seq_rm(0)
    assert loading.restore("conv:1", full).restored == 0  # the index offers nothing under this fingerprint
    assert answer(loader, full) == (want, 0)  # read afresh: the loader's own continuation
    # Handed the saver's files directly, the engine refuses every one by its header.
    match = index.lookup(saved.fingerprint(), full)
    assert match.chunks
    loader.seq_rm(0)
    res = loader.state_load(StateLoad(seq=0, chunks=match.request(), keep=match.keep, tokens=full))
    assert int(res.get("restored", 0)) == 0
    assert res["failed"] and all("fingerprint" in str(f.get("reason")) for f in res["failed"])
    saved.close()
    loading.close()
