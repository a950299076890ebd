"""Flash attention measured on this machine (docs/flash-attention.md, "Measured here"): the engine's measurement
on the real default model, and a KV file saved under one choice never restored under the other."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from hisho.core.planner import attention

CHUNK = 64
DOC = " ".join(f"Shelf {i} holds {i * 5 % 11} jars of {('jam', 'honey', 'oil')[i % 3]}." for i in range(30))


def test_measurement_returns_both_timings_and_a_choice(default_model_path: Path) -> None:
    """Small depth and ubatches: seconds on a shared box. The child keeps its answer where the planner reads
    it (per model file, context bucket, ubatches, threads, llama.cpp build)."""
    assert attention.recall(str(default_model_path), 2048, (64, 32)) is None
    probe = attention.measure(str(default_model_path), 2048, 64, 32, repeats=1, depth=256, timeout=240)
    assert probe.depth == 256 and (probe.ubatch_on, probe.ubatch_off) == (64, 32)
    for times in (probe.prompt_on_s, probe.prompt_off_s, probe.decode_on_s, probe.decode_off_s):
        assert len(times) == 1 and times[0] > 0
    assert set(probe.to_dict()["choices"]) == set(attention.WORKLOADS)
    assert attention.recall(str(default_model_path), 2048, (64, 32)) == probe
    assert attention.recall(str(default_model_path), 2048, (512, 256)) is None  # other ubatches: not measured


def test_a_serving_load_measures_a_step_of_every_sequence(default_model_path: Path) -> None:
    """Two sequences, one KV stream each, both filled to the depth: the decode step carries a token for each."""
    probe = attention.measure(str(default_model_path), 2048, 64, 32, repeats=1, depth=256, seqs=2, timeout=240)
    assert probe.seqs == 2 and probe.shallow == 0 and len(probe.decode_off_s) == 1 and probe.decode_on_s[0] > 0
    assert attention.recall(str(default_model_path), 2048, (64, 32), seqs=2) == probe
    assert attention.recall(str(default_model_path), 2048, (64, 32)) is None  # one sequence: not measured


def load(model: Path, flash_attn: bool) -> EngineClient:
    client = EngineClient()
    client.load(LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2, n_threads=1, flash_attn=flash_attn,
                           n_ubatch=512 if flash_attn else 256))
    return client


@pytest.fixture
def index(tmp_path: Path) -> Iterator[KVIndex]:
    idx = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    yield idx
    idx.db.close()


def saved(engine: EngineClient, session: KVSession, tokens: list[int]) -> None:
    engine.call("seq_rm", {"seq": 0, "start": 0})
    engine.call("prefill", {"seq": 0, "tokens": tokens})
    session.save("conv:1")
    assert session.flush(60)


def test_a_changed_choice_reads_the_conversation_again_once(default_model_path: Path, index: KVIndex) -> None:
    """A measurement that turns flash attention over changes the KV fingerprint: what was saved under the old
    choice is not offered (nor taken when handed over), the conversation is read again and saved under the new
    one, and the next restore under the new choice takes it."""
    with load(default_model_path, True) as on:
        tokens = on.tokenize(messages=[{"role": "user", "content": DOC}], add_generation_prompt=False)
        assert len(tokens) > 2 * CHUNK
        first = KVSession(on, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        saved(on, first, tokens)
        chunks = index.lookup(first.fingerprint(), tokens)
        first.close()
    with load(default_model_path, False) as off:
        second = KVSession(off, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        assert second.fingerprint() != first.fingerprint()
        assert second.restore("conv:1", tokens).restored == 0
        forced = off.call("state_load", {"seq": 0, "chunks": chunks.request(), "keep": chunks.keep})
        assert forced["restored"] == 0 and "fingerprint" in forced["failed"][0]["reason"]
        saved(off, second, tokens)  # read again once, kept under the new choice
        off.call("seq_rm", {"seq": 0, "start": 0})
        assert second.restore("conv:1", tokens).restored > 0
        second.close()


def test_the_idle_engine_measures_once_and_gives_way_to_requests(default_model_path: Path) -> None:
    """After a load the rule turned flash attention off for, the engine measures when idle (server._next_job):
    a waiting request stops it at once (it runs again later); done, the answer is kept and nothing is pending."""
    import llama_cpp

    from hisho.engine.lib.llama_setup import maps_file, model_params
    from hisho.engine.measure import attention as engine_side

    params = LoadParams(model_path=str(default_model_path), n_ctx=2048, n_batch=64, n_ubatch=32, flash_attn=False)
    assert engine_side.pending(params)
    assert not engine_side.pending(dataclasses.replace(params, flash_attn=True))  # the rule kept it on
    assert not engine_side.pending(dataclasses.replace(params, type_k="q8_0", type_v="q8_0"))
    model = llama_cpp.llama_model_load_from_file(params.model_path.encode("utf-8"),
                                                 model_params(params, maps_file(params)))
    try:
        assert not engine_side.when_idle(model, params, lambda: True)
        calls = iter(range(1000))
        assert not engine_side.when_idle(model, params, lambda: next(calls) > 3)  # stopped inside a decode
        assert engine_side.pending(params)
        assert engine_side.when_idle(model, params, engine_side.never)
    finally:
        llama_cpp.llama_model_free(model)
    assert not engine_side.pending(params)
    kept = attention.recall(str(default_model_path), 2048, (64, 32))
    assert kept is not None and kept.depth == attention.depth_for(2048) and len(kept.decode_off_s) == 3
    assert kept.shallow == attention.SHALLOW_DEPTH and len(kept.prompt_on_shallow_s) == 3  # both ends measured


def test_the_apps_engine_measures_when_idle_and_the_next_plan_takes_it(default_model_path: Path) -> None:
    """The engine process itself (server._next_job): loaded as the rule turns flash attention off, idle for the
    configured seconds, it keeps a measurement, and a request afterwards is answered as before."""
    import os
    import time

    key = (str(default_model_path), 2048, (64, 32))
    env = {**os.environ, attention.IDLE_ENV: "0.5"}
    with EngineClient(env=env) as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_batch=64, n_ubatch=32,
                               flash_attn=False, n_threads=0))
        deadline = time.monotonic() + 240
        while attention.recall(*key) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert attention.recall(*key) is not None
        assert client.tokenize(text="still here")  # the engine answers after measuring


def test_hisho_plan_measure_attention_plans_with_the_answer(default_model_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`hisho plan --measure-attention`: measured now, kept, and the plan (JSON) says the measured choice."""
    import json

    from hisho.cli.main import main

    assert main(["plan", "--ctx", "1024", "--min-ctx", "1024", "--no-calibrate", "--json",
                 "--measure-attention", str(default_model_path)]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    measured = data["attention_measured"]
    assert measured is not None and "measured here" in out.err and "measured here" in data["reason"]
    assert data["flash_attn"] is measured["choices"]["window"]
