"""The remote engine against real servers on loopback, started here with the bundled default model:
upstream llama.cpp's llama-server (``--parallel 2 --slot-save-path``) and llama-cpp-python's own server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import DONE, STOPPED, ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.documents.cache import model_fingerprint
from hisho.core.documents.service import Documents
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint
from tests.remote_peers import NOT_BUILT, Peer, llama_cpp_python_server, llama_server, llama_server_binary

# Real servers on a shared 2-core machine: behaviour only, with room for a loaded box.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
SHORT = ChatSettings(temperature=0.0, max_tokens=16, seed=1)
GREEDY = Sampling(temperature=0.0, max_tokens=24, seed=1)
SYSTEM = ("You are a careful assistant. " * 40).strip()      # a long, fixed prefix (~240 tokens)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    if llama_server_binary() is None:
        pytest.skip(NOT_BUILT)
    peer = llama_server(tmp_path_factory.mktemp("llama-server")).start()
    yield peer
    peer.stop()


def _engine(url: str, name: str = "workstation") -> RemoteEngine:
    eng = RemoteEngine(Endpoint(name, url), slot_min_tokens=64)
    eng.load(LoadParams(model_path=""))
    return eng


def _history(turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"Question {i}: name a fruit."},
                 {"role": "assistant", "content": f"Answer {i}: an apple."}]
    return msgs


def test_llama_server_chat_prefix_hit_and_stop(llama: Peer) -> None:
    eng = _engine(llama.url)
    assert eng.info.kind == "llama.cpp" and eng.info.slot_save and eng.load_info["n_ctx"] == 4096
    store = ConversationStore(Database(":memory:"))
    chat = ChatService(store, eng, model_name=eng.model)
    cid = store.create("remote", system_prompt=SYSTEM, settings=SHORT).id
    first = chat.run(chat.send(cid, "Say hello."))
    assert first.message.status == DONE and first.message.content and first.message.engine == "workstation"
    stream = eng.generate(messages=chat.prompt_messages(cid, extra_user="And now?"), sampling=GREEDY)
    res = stream.collect()
    # The second turn's prompt starts with the first one byte for byte: the server read only the new part.
    assert res.cached_tokens >= 0.9 * first.message.prompt_tokens, res
    assert res.extra["prompt_n"] < res.prompt_tokens - res.cached_tokens + 8

    turn = chat.send(cid, "Count from one to a thousand, one number per line.")
    turn.sampling = Sampling(temperature=0.0, max_tokens=2000)
    pieces: list[str] = []

    def on_text(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 5:
            turn.cancel()

    stopped = chat.run(turn, on_text)
    assert stopped.message.status == STOPPED and 0 < len(pieces) < 200
    assert eng.generate(messages=[{"role": "user", "content": "hi"}], sampling=GREEDY).collect().text


def test_llama_server_slot_restore_after_restart(llama: Peer) -> None:
    eng = _engine(llama.url)
    history = _history(6)
    first = eng.generate(messages=history + [{"role": "user", "content": "One more fruit?"}], sampling=GREEDY)
    res = first.collect()
    assert "slot_saved" in res.extra, res.extra                  # saved under a content-derived name
    conversation = history + [{"role": "user", "content": "One more fruit?"},
                              {"role": "assistant", "content": res.text}]
    llama.restart()                                             # the server forgot every slot
    eng2 = _engine(llama.url)                                   # a fresh client too (Hisho restarted)
    after = eng2.generate(messages=conversation + [{"role": "user", "content": "And a vegetable?"}],
                          sampling=GREEDY).collect()
    assert eng2.slots is not None and eng2.slots.restored == 1
    # The server's own count: only the new message was read, not the restored conversation.
    assert after.extra["prompt_n"] < 0.2 * after.prompt_tokens, after
    assert after.cached_tokens >= 0.8 * after.prompt_tokens


def test_llama_cpp_python_server_is_a_second_peer(tmp_path: Path) -> None:
    peer = llama_cpp_python_server(tmp_path).start()
    try:
        eng = _engine(peer.url, "laptop-2")
        assert eng.info.kind == "llama-cpp-python" and eng.model == "smollm2"
        assert eng.slots is None                                # no slot files there: resume is its job
        store = ConversationStore(Database(":memory:"))
        chat = ChatService(store, eng, model_name=eng.model)
        cid = store.create("remote", settings=SHORT).id
        out = chat.run(chat.send(cid, "Say hello."))
        assert out.message.status == DONE and out.message.content
        assert out.message.tokens and out.message.tokens > 0
        assert eng.count_tokens(messages=[{"role": "user", "content": "hello there"}]) > 0
        turn = chat.send(cid, "Count from one to a thousand.")
        turn.sampling = Sampling(temperature=0.0, max_tokens=2000)
        seen: list[str] = []

        def on_text(piece: str) -> None:
            seen.append(piece)
            if len(seen) == 3:
                turn.cancel()

        assert chat.run(turn, on_text).message.status == STOPPED
    finally:
        peer.stop()


def _stations(tmp: Path) -> Path:
    """A markdown document of about 1,200 tokens in sections: longer than a 1,024-token context holds."""
    parts = ["# Weather stations, March\n"]
    for i in range(1, 7):
        parts.append(f"\n## Station {i}\n\n" + " ".join(
            f"On day {d} station {i} recorded {10 + i + d % 5} degrees and {d % 3} mm of rain." for d in range(1, 11)))
    path = tmp / "stations.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


@pytest.mark.timeout(3000)
def test_llama_server_summarizes_a_document_map_reduce(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A document summary on the remote engine: the same map-reduce, sized to the context the server reports
    (1,024 tokens a slot here), its parts sent as parallel requests to the server's two slots. Replies are 8
    tokens and the ETA's one-off speed probe is answered from the cache: behaviour, on a loaded machine."""
    if llama_server_binary() is None:
        pytest.skip(NOT_BUILT)
    peer = llama_server(tmp_path_factory.mktemp("small-ctx"), n_ctx_per_slot=1024).start()
    try:
        eng = _engine(peer.url)
        assert eng.load_info["n_ctx"] == 1024 and eng.info.slots == 2
        store = ConversationStore(Database(":memory:"))
        docs = Documents(store, eng)
        assert eng.load_params is not None
        docs.cache().put_speeds(model_fingerprint(eng.load_params.model_path), 500.0, 20.0, 1.9)
        job = docs.job([_stations(tmp_path_factory.mktemp("doc"))], summary_tokens=8, final_tokens=8,
                       chunk_target=256)
        assert job.n_ctx == 1024
        result = job.run()
        assert not result.cancelled and not result.skipped, result.summary
        d = result.documents[0]
        assert d.mode == "map_reduce" and d.chunks >= 3 and d.input_tokens > 1024, d
        assert d.n_parallel >= 1 and result.parts and len(result.parts) == d.chunks
        assert "By part:" in result.summary and "Station" in result.summary
        cid, _note = docs.open_result(result)          # opened as a chat; nothing to prefill on this computer
        assert cid is not None and store.branch(cid)[-1].content.strip()
    finally:
        peer.stop()
