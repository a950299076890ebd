"""A document summary's batch on a remote engine (loopback stub server), the engine choice kept in
engines.json, and how a hub file is matched to what a server serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.engine.ops import BatchGenerate, Prompt
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.remote import endpoints
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint, RemoteError
from hisho.core.remote.hub_match import serve_command, served_as
from tests.remote_stub import StubServer


def _batch(n: int, parallel: int) -> BatchGenerate:
    items = [Prompt(messages=[{"role": "user", "content": f"part {i}"}], max_tokens=8).to_wire() for i in range(n)]
    return BatchGenerate(items=items, sampling=Sampling(temperature=0.0), n_parallel=parallel)


def test_batch_runs_every_item_as_its_own_request() -> None:
    with StubServer("ok") as srv:
        eng = RemoteEngine(Endpoint("box", srv.url))
        eng.load(LoadParams(model_path=""))
        stream = eng.batch(_batch(5, 2))
        events = list(stream)
        sent = [r for r in srv.requests if "messages" in r]
    assert sorted(e["item"] for e in events) == [0, 1, 2, 3, 4]
    assert all(e["text"] == "Hello from the stub." and e["completion_tokens"] == 5 for e in events)
    assert sorted(r["messages"][0]["content"] for r in sent) == [f"part {i}" for i in range(5)]
    assert all(r["max_tokens"] == 8 and "id_slot" not in r for r in sent)   # never the chat's slot
    assert stream.result is not None and stream.result.completion_tokens == 25
    assert {"wall_s", "pure_decode_s", "decode_tokens_per_s", "prefill_tokens"} <= set(stream.result.extra)


def test_batch_fails_in_one_line_when_the_server_drops() -> None:
    with StubServer("drop") as srv:
        eng = RemoteEngine(Endpoint("box", srv.url))
        eng.load(LoadParams(model_path=""))
        with pytest.raises(RemoteError, match="box dropped the connection"):
            list(eng.batch(_batch(3, 2)))


def test_choice_is_kept_with_the_engines(tmp_path: Path) -> None:
    path = tmp_path / "engines.json"
    assert endpoints.load_choice(path) == (endpoints.LOCAL, "")
    endpoints.save_endpoints([Endpoint("box", "http://box:8080")], path)
    endpoints.save_choice("box", "big-model", path)
    assert endpoints.load_choice(path) == ("box", "big-model")
    endpoints.save_endpoints([Endpoint("box", "http://box:8081")], path)     # editing engines keeps it
    assert endpoints.load_choice(path) == ("box", "big-model")
    endpoints.save_endpoints([], path)                                        # the engine was removed
    assert endpoints.load_choice(path) == (endpoints.LOCAL, "")
    endpoints.save_endpoints([Endpoint("box", "http://box:8080")], path)
    endpoints.save_choice(endpoints.LOCAL, "ignored", path)
    assert endpoints.load_choice(path) == (endpoints.LOCAL, "")


def test_a_hub_file_is_found_under_the_names_servers_give_it() -> None:
    repo, name = "org/Big-70B-GGUF", "Q4_K_M/Big-70B-Q4_K_M-00001-of-00002.gguf"
    assert served_as(["/srv/models/Big-70B-Q4_K_M-00001-of-00002.gguf"], repo, name, "Q4_K_M")  # --model path
    assert served_as(["org/Big-70B-GGUF:Q4_K_M"], repo, name, "Q4_K_M")                       # -hf repo:quant
    assert served_as(["org/big-70b-gguf"], repo, name, "Q4_K_M")                               # vLLM: the repo
    assert served_as(["big-70b-q4_k_m"], repo, name, "Q4_K_M")                                  # an alias
    assert not served_as(["org/Big-70B-GGUF:Q2_K", "/m/Big-70B-Q2_K.gguf", "qwen"], repo, name, "Q4_K_M")
    assert serve_command(repo, "Q4_K_M").startswith("llama-server -hf org/Big-70B-GGUF:Q4_K_M --host 0.0.0.0 ")
