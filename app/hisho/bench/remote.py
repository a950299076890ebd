"""``hisho bench remote --tokens N --json``: a remote chat against upstream llama-server on loopback.

One run, ratios against baselines from the same run (docs/architecture.md, "How we measure"):
1. ``prefix_hit_ratio``: the second turn of a remote chat; prompt tokens the server reports as cached
   (``timings.cache_n``) ÷ tokens of the first turn's prompt.
2. ``remote_resume_speedup``: an N-token conversation, its slot saved after the turn; the server restarted;
   time to first token of the next message without slot restore ÷ with it (restore included: the clock
   starts before Hisho asks the server anything). The server restarts before each measurement.
3. ``remote_vs_direct``: decode tokens/s of the same greedy request (``--repeat`` times, interleaved, median)
   as Hisho shows it ÷ measured by the ``openai`` client sent straight to the server. Hisho shows the
   server's own ``timings.predicted_per_second``; the client-side figure of Hisho's stream is reported too.
The server runs with ``--parallel 2 --slot-save-path`` in a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench.servers import NOT_BUILT, Peer, llama_server, llama_server_binary
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.errors import UserError
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint, call

GREEDY = Sampling(temperature=0.0, max_tokens=16, seed=1)
DECODE = Sampling(temperature=0.0, max_tokens=128, seed=1, ignore_eos=True)


def _conversation(engine: RemoteEngine, n_tokens: int) -> list[dict[str, str]]:
    """System prompt + turns of fixed text until the rendered prompt reaches ``n_tokens``."""
    colours = ("red", "green", "blue", "yellow", "white")
    msgs = [{"role": "system", "content": "You answer questions about the list the user gives."}]
    i = 0
    while engine.count_tokens(messages=msgs) < n_tokens - 200:
        part = " ".join(f"Item {j} is a {colours[j % 5]} box holding {j * 7 % 13} apples."
                        for j in range(i, i + 20))
        msgs += [{"role": "user", "content": f"More of the list: {part}"},
                 {"role": "assistant", "content": "Noted."}]
        i += 20
    return msgs


def _ttft(engine: RemoteEngine, messages: list[dict[str, str]]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    stream = engine.generate(messages=messages, sampling=GREEDY)   # a slot restore, when needed, runs here
    first = None
    for _ in stream:
        if first is None:
            first = time.perf_counter()
    assert stream.result is not None
    return (first or time.perf_counter()) - started, stream.result.extra


def _direct_tps(peer: Peer, model: str, messages: list[dict[str, str]]) -> float:
    from openai import OpenAI

    client = OpenAI(base_url=peer.url + "/v1", api_key="none")
    stream: Any = client.chat.completions.create(model=model, messages=messages, stream=True,  # type: ignore[arg-type]
                                                 temperature=0.0, max_tokens=DECODE.max_tokens, seed=1,
                                                 extra_body={"ignore_eos": True, "cache_prompt": True})
    stamps = [time.perf_counter() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    if llama_server_binary() is None:
        raise UserError(NOT_BUILT)
    n_tokens = int(args.tokens or 4096)
    repeat = max(1, int(args.repeat))
    with tempfile.TemporaryDirectory(prefix="hisho-bench-remote-") as tmp:
        peer = llama_server(Path(tmp), n_ctx_per_slot=n_tokens + 1024, threads=2).start()
        try:
            return _measure(peer, n_tokens, repeat)
        finally:
            peer.stop()


def _engine(peer: Peer, slots: bool = True) -> RemoteEngine:
    eng = RemoteEngine(Endpoint("bench", peer.url), slot_min_tokens=64)
    eng.load(LoadParams(model_path=""))
    if not slots:
        eng.slots = None
    return eng


def _measure(peer: Peer, n_tokens: int, repeat: int) -> dict[str, Any]:
    eng = _engine(peer)
    conv = _conversation(eng, n_tokens)
    first_msgs = conv + [{"role": "user", "content": "What colour is item 17?"}]
    first = eng.generate(messages=first_msgs, sampling=GREEDY).collect()
    second = eng.generate(messages=first_msgs + [{"role": "assistant", "content": first.text},
                                                 {"role": "user", "content": "And item 18?"}],
                          sampling=GREEDY).collect()
    prefix_hit = second.cached_tokens / first.prompt_tokens if first.prompt_tokens else 0.0

    # The saved slot now holds: first_msgs + first reply + "And item 18?" + second reply.
    history = first_msgs + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And item 18?"},
                            {"role": "assistant", "content": second.text}]
    nxt = history + [{"role": "user", "content": "And item 19?"}]
    peer.restart()
    ttft_without, without = _ttft(_engine(peer, slots=False), nxt)
    peer.restart()
    fresh = _engine(peer)
    ttft_with, with_ = _ttft(fresh, nxt)
    restored = fresh.slots.last_restore if fresh.slots else {}

    shown, client, direct = [], [], []
    ask = conv[:3] + [{"role": "user", "content": "Write a long story about the boxes."}]
    for _ in range(repeat):
        stream = eng.generate(messages=ask, sampling=DECODE)
        stamps = [time.perf_counter() for ev in stream if ev["text"]]
        assert stream.result is not None
        shown.append(stream.result.tokens_per_s)
        client.append((len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0)
        direct.append(_direct_tps(peer, eng.model, ask))
    props = call(eng.endpoint, "GET", "/props")
    med = statistics.median
    return {
        "bench": "remote", "server": "llama-server", "server_build": props.get("build_info", ""),
        "model": eng.model, "conversation_tokens": first.prompt_tokens,
        "prefix_hit_ratio": round(prefix_hit, 4),
        "second_turn_cached_tokens": second.cached_tokens, "first_turn_prompt_tokens": first.prompt_tokens,
        "remote_resume_speedup": round(ttft_without / ttft_with, 2) if ttft_with else 0.0,
        "ttft_without_restore_s": round(ttft_without, 4), "ttft_with_restore_s": round(ttft_with, 4),
        "prompt_n_without_restore": without.get("prompt_n"), "prompt_n_with_restore": with_.get("prompt_n"),
        "slot_restore_ms": (restored.get("timings") or {}).get("restore_ms"),
        "remote_vs_direct": round(med(shown) / med(direct), 4) if med(direct) else 0.0,
        "hisho_shown_tokens_per_s": round(med(shown), 2), "hisho_client_tokens_per_s": round(med(client), 2),
        "direct_openai_tokens_per_s": round(med(direct), 2),
        "remote_vs_direct_client_side": round(med(client) / med(direct), 4) if med(direct) else 0.0,
        "repeat": repeat,
    }
