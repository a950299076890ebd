"""The batched map phase (engine/decode/batched.py through the batch_generate op) on the real model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.errors import EngineError

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=12)


@pytest.fixture(scope="module")
def batched(engine_home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient()
    # n_batch 64: long prompts take several steps, so decode tokens of other sequences must ride along.
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_batch=64, n_ubatch=64,
                           n_seq_max=4, kv_unified=True))
    yield client
    client.close()
    mp.undo()


def ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Name one fact about the number {i}."}]


def run(client: EngineClient, items: list[dict[str, object]], n_parallel: int, sampling: Sampling = GREEDY,
        cells: int = 0) -> tuple[dict[int, dict[str, object]], dict[str, object]]:
    """One batch_generate; ``cells`` > 0 runs it in a job context of that many cells per sequence."""
    request: dict[str, object] = {"items": items, "sampling": sampling.to_dict(), "n_parallel": n_parallel}
    if cells:
        request["n_ctx_per_seq"] = cells
    stream = client.stream("batch_generate", request)
    out: dict[int, dict[str, object]] = {}
    for ev in stream:
        assert int(ev["item"]) not in out, "an item was reported twice"
        out[int(ev["item"])] = ev
    assert stream.result is not None
    return out, stream.result.extra


def test_one_sequence_equals_plain_generate(batched: EngineClient) -> None:
    reference = []
    for i in range(3):
        batched.call("seq_rm", {"seq": 0, "start": 0})
        reference.append(batched.generate(messages=ask(i), sampling=GREEDY).collect().text)
    out, stats = run(batched, [{"messages": ask(i)} for i in range(3)], n_parallel=1)
    assert [out[i]["text"] for i in range(3)] == reference
    assert stats["n_parallel"] == 1 and stats["items"] == 3


def test_a_stop_string_ends_a_batch_item_as_it_ends_a_reply(batched: EngineClient) -> None:
    """Sampling.stop is honoured by the batch loop too (it was only the single reply's)."""
    batched.call("seq_rm", {"seq": 0, "start": 0})
    full = batched.generate(messages=ask(1), sampling=GREEDY).collect().text
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    with_stop = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=12, stop=[stop])
    batched.call("seq_rm", {"seq": 0, "start": 0})
    reply = batched.generate(messages=ask(1), sampling=with_stop).collect()
    out, _stats = run(batched, [{"messages": ask(1)}, {"messages": ask(2)}], n_parallel=1, sampling=with_stop)
    assert reply.stop_reason == "stop"
    assert out[0]["stop_reason"] == "stop" and out[0]["text"] == reply.text
    assert stop in str(out[0]["text"]) and len(str(out[0]["text"])) < len(full)


def test_continuous_batching_serves_more_items_than_sequences(batched: EngineClient) -> None:
    items = [{"messages": ask(i), "max_tokens": 6 + 3 * i} for i in range(7)]
    out, stats = run(batched, items, n_parallel=3)
    assert sorted(out) == list(range(7))
    for i in range(7):
        assert out[i]["completion_tokens"] == 6 + 3 * i or out[i]["stop_reason"] == "eos"
        assert str(out[i]["text"]).strip()
    assert stats["n_parallel"] == 3
    # Several sequences shared each decode step: far fewer llama_decode calls than tokens generated.
    assert int(stats["steps"]) < int(stats["decode_tokens"])
    used = {int(ev["seq"]) for ev in out.values()}
    assert used == {0, 1, 2}


def test_decode_tokens_ride_along_with_prefill(batched: EngineClient) -> None:
    long_text = "Summarize: " + "the river runs past the old mill and the bakery. " * 40  # ~450 tokens
    items = [{"messages": ask(1), "max_tokens": 30}, {"prompt": long_text, "max_tokens": 4}]
    out, stats = run(batched, items, n_parallel=2)
    assert sorted(out) == [0, 1]
    # The short prompt finished prefill first; its decode tokens went into the long prompt's prefill batches.
    assert int(stats["pure_decode_tokens"]) < int(stats["decode_tokens"])
    assert int(stats["prefill_tokens"]) == int(out[0]["prompt_tokens"]) + int(out[1]["prompt_tokens"])


def test_cancel_stops_and_frees_the_sequences(batched: EngineClient) -> None:
    sampling = Sampling(temperature=0.0, max_tokens=400, ignore_eos=True)
    stream = batched.stream("batch_generate", {"items": [{"messages": ask(i)} for i in range(6)],
                                               "sampling": sampling.to_dict(), "n_parallel": 2})
    stream.cancel()
    got = list(stream)
    assert stream.result is not None and stream.result.stop_reason == "cancelled"
    assert len(got) < 6
    for seq in range(4):  # every sequence was wiped: a plain generate starts from nothing
        assert batched.call("seq_rm", {"seq": seq, "start": 0})["held"] == 0
    again = batched.generate(messages=ask(5), sampling=GREEDY, seq=1).collect()
    assert again.cached_tokens == 0 and again.completion_tokens > 0


def test_too_long_item_is_refused(batched: EngineClient) -> None:
    with pytest.raises(EngineError) as err:
        run(batched, [{"messages": ask(1), "max_tokens": 4000}], n_parallel=1)
    assert err.value.kind == "context_full"


# ----- job contexts: one KV stream per sequence, swapped in for the batch (Runtime.job_context) ----------------

def test_job_context_replies_equal_plain_generate(batched: EngineClient) -> None:
    reference = []
    for i in range(4):
        batched.call("seq_rm", {"seq": 0, "start": 0})
        reference.append(batched.generate(messages=ask(i), sampling=GREEDY).collect().text)
    out, stats = run(batched, [{"messages": ask(i)} for i in range(4)], n_parallel=3, cells=200)
    # Greedy replies of sequences in separate streams, decoded together, are those of one sequence alone.
    assert [out[i]["text"] for i in range(4)] == reference
    assert stats["n_parallel"] == 3 and {int(ev["seq"]) for ev in out.values()} == {0, 1, 2}


def test_chat_context_is_made_again_after_a_job(batched: EngineClient) -> None:
    batched.call("seq_rm", {"seq": 0, "start": 0})
    first = batched.generate(messages=ask(9), sampling=GREEDY).collect()
    run(batched, [{"messages": ask(i)} for i in range(5)], n_parallel=5, cells=256)
    # The loaded context again, not the job's (5 streams of 256 cells): one sequence takes 900+ tokens.
    long_text = "Summarize: " + "the river runs past the old mill and the bakery. " * 90
    long = batched.generate(prompt=long_text, seq=3, sampling=Sampling(temperature=0.0, max_tokens=2)).collect()
    assert long.prompt_tokens > 900 and long.completion_tokens > 0
    again = batched.generate(messages=ask(9), sampling=GREEDY).collect()
    # What the chat sequence held was dropped with the old context: everything is prefilled again, same reply.
    assert again.cached_tokens == 0 and again.text == first.text


def test_job_item_longer_than_its_stream_is_refused(batched: EngineClient) -> None:
    with pytest.raises(EngineError) as err:
        run(batched, [{"messages": ask(1), "max_tokens": 300}], n_parallel=1, cells=256)
    assert err.value.kind == "context_full" and "256 cells of a sequence" in str(err.value)
    assert batched.generate(messages=ask(2), sampling=GREEDY).collect().completion_tokens > 0
