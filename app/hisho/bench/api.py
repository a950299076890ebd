"""``hisho bench api``: the API (``hisho serve``'s server, in-process on loopback) against the engine it runs on.

In a throw-away HISHO_HOME, one model loaded for 4 sequences of ``PER_SEQ`` tokens (one KV stream each):
- ``api_vs_engine``: decode tokens/s of one streamed chat request through HTTP over the same reply asked of the
  engine directly (``Engine.generate``), both greedy, both from an empty sequence; median of per-repetition
  ratios. ``ttfb_overhead_ms``: the API's first content chunk minus the engine's first token, both timed from
  the request; median over those pairs and ``TTFB_PAIRS`` more short ones (``ttfb_pairs`` in all). The HTTP
  client is one ``httpx.Client`` kept for the whole run, as API clients keep theirs. ``ttfb_outside_engine_ms``:
  the same difference with each side's own prefill (the engine's ``ttft_s`` for that request) taken out, so
  the run-to-run noise of two prefills (tens of ms here) does not swamp the few ms the API adds.
- ``concurrent_gain``: tokens/s of 4 concurrent API streams (4 prompts) over one stream alone.
  ``raw_batched_gain``: the same ratio for llama.cpp itself in the same run (``engine/rawbench.batched_decode``:
  the engine's serving context parameters, the same 4 prompts, greedy ``llama_decode`` steps of all sequences
  together, no HTTP, no engine process): the ceiling that serving the streams together can reach on this
  machine and model; ``concurrent_vs_raw_gain`` is the first over the second.
- ``one_stream_vs_raw`` and ``concurrent_vs_raw``: the API's decode rate (one stream: first streamed token to
  the last, ``one_stream_decode_tokens_per_s``; 4 streams: tokens over the stretch where all of them decode,
  ``concurrent_decode_tokens_per_s``) over raw llama-cpp-python's on the same
  context (``raw_one_tokens_per_s``, ``raw_batched_tokens_per_s``: its steps after the prompts). Like with like:
  ``one_stream_tokens_per_s`` and ``concurrent_tokens_per_s`` count from the request, prompt prefill included,
  which the raw figures do not (on the bundled model a 200-token reply's ~35-token prompt and first step are a
  sizeable share of its wall time).
- ``concurrent_vs_llama_server`` and ``one_stream_vs_llama_server``: the same 4 concurrent streams (and the one
  alone) sent to upstream ``llama-server`` on the same file with ``--parallel 4`` and a context of 4 × ``PER_SEQ``,
  its defaults otherwise (threads, batch sizes, flash attention ``auto``, its prompt cache off per request so
  each repetition prefills as Hisho's does), started beside Hisho's server and asked in turn with it, each
  repetition: decode rates counted as above (``llama_server_*``). ``concurrent_whole_vs_llama_server``: the
  rates counted from the requests. Skipped (``llama_server`` says why) where llama-server is not built.
- ``concurrent_deep_decode_tokens_per_s`` (and ``llama_server_``…, ``concurrent_deep_vs_llama_server``): the 4
  streams at once again, each behind a ~4,000-token system prompt, once per contestant: decode with every
  sequence at depth, the other end of flash attention's trade (docs/flash-attention.md).
- ``attention``: what the serve load's flash-attention measurement said (the bench measures it first, as the
  app's engine does when idle; null: the load was not open to one) and ``flash_attn``: what the engine ran.
- ``prefix_restart_speedup``: first-token time of a chat with a ~4096-token system prompt on an empty store over
  the same request after the server (and engine) were stopped and started again (the disk prompt cache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from hisho.api.launch import build_api
from hisho.bench.homes import temporary_home
from hisho.bench.servers import NOT_BUILT, Peer, llama_server_binary, llama_server_peer
from hisho.core.engine.protocol import GenerationResult, Sampling

KEY = "bench"
PARALLEL = 4
PER_SEQ = 4608
# Tokens each deep stream writes: enough that the first to finish its prompt is still decoding when the last
# starts (a token per prompt batch rides along meanwhile), within the ``PER_SEQ`` cells a sequence has.
DEEP_TOKENS = 128
TTFB_PAIRS = 8  # short requests (4 tokens) for ttfb_overhead_ms, besides the ``repeat`` long ones
PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a map in a bottle."


def _stream(client: httpx.Client, url: str, model: str, messages: list[dict[str, str]],
            max_tokens: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chat request: first content chunk, last chunk, tokens (from usage), cached tokens. ``client``
    is kept across requests, as API clients (openai's included) keep theirs: a new ``httpx.Client`` per request
    builds a TLS context first (40-75 ms on the loaded 2-core box), which is the bench's cost, not the API's."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    start = time.perf_counter()
    first = last = 0.0
    times: list[float] = []   # each content chunk's arrival (one per token event)
    usage: dict[str, Any] = {}
    with client.stream("POST", url + "/chat/completions", json=body, timeout=600,
                       headers={"Authorization": f"Bearer {KEY}"}) as r:
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"the API answered {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
                times.append(last)
    n = int(usage.get("completion_tokens", 0)) or len(times)  # a server that reports no usage: its chunks
    return {"ttft_s": first - start, "tokens": n, "wall_s": last - start, "first_at": first, "last_at": last, "times": times,
            "tokens_per_s": (n - 1) / (last - first) if n > 1 and last > first else 0.0,
            "cached": int(usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)),
            "engine_ttft_s": _results.pop().ttft_s if _results else 0.0}


_results: list[GenerationResult] = []  # what the engine reported for the API's last request (Backend.on_result)


def _engine(engine: Any, messages: list[dict[str, str]], max_tokens: int) -> dict[str, float]:
    start = time.perf_counter()
    stream = engine.generate(messages=messages, sampling=Sampling(temperature=0.0, repeat_penalty=1.0,
                                                                   max_tokens=max_tokens))
    first = last = 0.0
    for _ in stream:
        last = time.perf_counter()
        first = first or last
    n = stream.result.completion_tokens
    return {"ttft_s": first - start, "tokens": n, "engine_ttft_s": stream.result.ttft_s,
            "tokens_per_s": (n - 1) / (last - first) if n > 1 and last > first else 0.0}


def _pair(i: int, client: httpx.Client, engine: Any, url: str, model: str, ask: list[dict[str, str]],
          n_tokens: int) -> dict[str, dict[str, float]]:
    """The same greedy request asked of the engine and of the API, each from empty sequences; the order
    alternates with ``i``."""
    got = {}
    for which in (("engine", "api") if i % 2 == 0 else ("api", "engine")):
        _clear(engine)
        got[which] = (_engine(engine, ask, n_tokens) if which == "engine"
                      else _stream(client, url, model, ask, n_tokens))
    return got


def _clear(engine: Any) -> None:
    for seq in range(PARALLEL):
        engine.seq_rm(seq, 0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    n_tokens = max(32, args.tokens or 200)
    repeat = max(1, args.repeat)
    ask = [{"role": "user", "content": PROMPT}]
    out: dict[str, Any] = {"tokens": n_tokens, "repeat": repeat, "parallel": PARALLEL, "n_ctx_per_seq": PER_SEQ}
    with temporary_home("hisho-bench-api-") as home, ExitStack() as stack:
        out["attention"] = _measure_attention(args.model)
        app, server, _ = build_api(args.model, parallel=PARALLEL, n_ctx=PER_SEQ, key=KEY)
        out["flash_attn"] = bool(app.load_params and app.load_params.flash_attn)
        client = httpx.Client()
        try:
            peer = _llama_server(app.model_path, Path(home), out)
            if peer is not None:
                stack.callback(peer.stop)
            server.start()
            model, url, engine = server.backend.model_id, server.url, app.engine
            out["model"] = model
            server.backend.on_result = lambda result: _results.append(result)
            ratios, overheads, outside, api_tps, eng_tps = [], [], [], [], []
            for i in range(repeat + TTFB_PAIRS):
                # First-token times vary by tens of ms from one prefill to the next on a shared box: more pairs,
                # short ones (4 tokens) after the ``repeat`` long ones.
                got = _pair(i, client, engine, url, model, ask, n_tokens if i < repeat else 4)
                api, eng = got["api"], got["engine"]
                if i < repeat:
                    api_tps.append(api["tokens_per_s"])
                    eng_tps.append(eng["tokens_per_s"])
                    ratios.append(api["tokens_per_s"] / max(eng["tokens_per_s"], 1e-9))
                overheads.append((api["ttft_s"] - eng["ttft_s"]) * 1000)
                outside.append((api["ttft_s"] - api["engine_ttft_s"] - eng["ttft_s"] + eng["engine_ttft_s"]) * 1000)
            server.backend.on_result = None
            out.update(api_tokens_per_s=statistics.median(api_tps), engine_tokens_per_s=statistics.median(eng_tps),
                       api_vs_engine=statistics.median(ratios), ttfb_overhead_ms=statistics.median(overheads),
                       ttfb_outside_engine_ms=statistics.median(outside), ttfb_pairs=len(overheads))
            out.update(_concurrent(client, engine, url, model, n_tokens, repeat,
                                   peer.url + "/v1" if peer is not None else ""))
            out.update(_concurrent_deep(client, engine, url, model, peer.url + "/v1" if peer is not None else ""))
            out.update(_raw_ceiling(engine, n_tokens))
            out["concurrent_vs_raw_gain"] = out["concurrent_gain"] / out["raw_batched_gain"]
            # Like with like: the API's decode rate over raw llama-cpp-python's on the same context.
            out["one_stream_vs_raw"] = out["one_stream_decode_tokens_per_s"] / max(out["raw_one_tokens_per_s"], 1e-9)
            out["concurrent_vs_raw"] = (out["concurrent_decode_tokens_per_s"]
                                        / max(out["raw_batched_tokens_per_s"], 1e-9))
            if peer is not None:
                for ours, theirs, name in (
                        ("concurrent_decode_tokens_per_s", "llama_server_concurrent_decode_tokens_per_s",
                         "concurrent_vs_llama_server"),
                        ("one_stream_decode_tokens_per_s", "llama_server_one_stream_decode_tokens_per_s",
                         "one_stream_vs_llama_server"),
                        ("concurrent_tokens_per_s", "llama_server_concurrent_tokens_per_s",
                         "concurrent_whole_vs_llama_server")):
                    out[name] = out[ours] / max(out[theirs], 1e-9)
                peer.stop()
            fresh = _stream(client, url, model, _long_prefix(), 8)
        finally:
            client.close()
            server.stop()
            app.close()
        # The restart: a new engine process and server on the same store.
        app, server, _ = build_api(args.model, parallel=PARALLEL, n_ctx=PER_SEQ, key=KEY)
        try:
            server.start()
            with httpx.Client() as client:
                restored = _stream(client, server.url, server.backend.model_id, _long_prefix(), 8)
        finally:
            server.stop()
            app.close()
    out.update(prefix_tokens_cached=restored["cached"], ttft_fresh_s=fresh["ttft_s"],
               ttft_restored_s=restored["ttft_s"],
               prefix_restart_speedup=fresh["ttft_s"] / max(restored["ttft_s"], 1e-9))
    return out


def _concurrent(client: httpx.Client, engine: Any, url: str, model: str, n_tokens: int,
                repeat: int, peer_url: str = "") -> dict[str, float]:
    """One stream alone, then the 4 together, through Hisho's API and (``peer_url``) llama-server's, in turn
    each repetition."""
    prompts = [[{"role": "user", "content": f"{PROMPT} Chapter {i + 1}."}] for i in range(PARALLEL)]
    got: dict[str, list[float]] = {}
    contestants: list[tuple[str, str, str, dict[str, Any] | None]] = [("", url, model, None)]
    if peer_url:
        # Its prompt cache off: each repetition prefills its prompts again, as Hisho's (sequences cleared) does.
        contestants.append(("llama_server_", peer_url, "model", {"cache_prompt": False}))
        _stream(client, peer_url, "model", prompts[0], 8, contestants[1][3])  # its first graphs, page faults
    for _ in range(repeat):
        for prefix, where, name, extra in contestants:
            if not prefix:
                _clear(engine)
            alone = _stream(client, where, name, prompts[0], n_tokens, extra)
            if not prefix:
                _clear(engine)
            results, whole = _together(client, where, name, prompts, n_tokens, extra)
            # Decode only, as the raw ceiling counts it (its steps after the prompts): from the first streamed
            # token to the last, tokens after each stream's first. The whole figures include the prompts' prefill.
            for key, value in (("one_stream_tokens_per_s", alone["tokens"] / alone["wall_s"]),
                               ("concurrent_tokens_per_s", whole),
                               ("one_stream_decode_tokens_per_s", alone["tokens_per_s"]),
                               ("concurrent_decode_tokens_per_s", _all_decoding_rate(results))):
                got.setdefault(prefix + key, []).append(value)
    out = {key: statistics.median(values) for key, values in got.items()}
    out["concurrent_gain"] = out["concurrent_tokens_per_s"] / max(out["one_stream_tokens_per_s"], 1e-9)
    return out


def _measure_attention(model: str | None) -> str | None:
    """Flash attention for the serve load as the app runs it on this machine (docs/flash-attention.md, "Measured
    here"): the app's engine measures after its first idle half-minute and its next load takes the answer; a
    bench's engine never measures beside what it times, so the bench measures first (in a child, as ``hisho plan
    --measure-attention`` does, kept in the bench's temporary home) and then loads. Returns what the plan says of
    the measurement, or None where the load is not open to one (the rule's choice stands)."""
    from hisho.core.planner import attention
    from hisho.core.planner.calibrate import ProbeFailed
    from hisho.engine.measure.attention import pending

    app, server, _ = build_api(model, parallel=PARALLEL, n_ctx=PER_SEQ, key=KEY)
    try:
        params = app.load_params
    finally:
        server.stop()
        app.close()
    if params is None or not pending(params):
        return None
    try:
        probe = attention.measure(params.model_path, params.n_ctx, params.n_batch, params.n_ubatch,
                                  seqs=attention.sequences(params.n_seq_max, params.kv_unified))
    except ProbeFailed as exc:
        return str(exc)
    return probe.summary("serve")


def _llama_server(model_path: Path | str | None, home: Path, out: dict[str, Any]) -> Peer | None:
    """Upstream llama-server on the same file, ``--parallel 4`` over 4 × ``PER_SEQ`` cells, its defaults
    otherwise; None (and ``out["llama_server"]`` says why) where it is not built."""
    binary = llama_server_binary()
    if binary is None or model_path is None:
        out["llama_server"] = NOT_BUILT if binary is None else "no model file"
        return None
    peer = llama_server_peer(binary, model_path, home / "llama-server.log", parallel=PARALLEL,
                             ctx_size=PER_SEQ * PARALLEL)
    out["llama_server"] = " ".join(peer.argv[1:])
    return peer.start()


def _together(client: httpx.Client, url: str, model: str, prompts: list[list[dict[str, str]]], n_tokens: int,
              extra: dict[str, Any] | None) -> tuple[list[dict[str, Any]], float]:
    """``prompts`` asked at once, a thread each: their streams and the tokens per second of the whole."""
    results: list[dict[str, Any]] = []
    start = time.perf_counter()
    threads = [threading.Thread(target=lambda p=p: results.append(_stream(client, url, model, p, n_tokens, extra)))
               for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, sum(r["tokens"] for r in results) / (time.perf_counter() - start)


def _concurrent_deep(client: httpx.Client, engine: Any, url: str, model: str, peer_url: str) -> dict[str, float]:
    """The 4 streams together again, each behind a system prompt of about 4,000 tokens: decode with
    every sequence at depth, where flash attention's cost is not what it is near an empty context
    (docs/flash-attention.md). Once each, Hisho's API then llama-server's; the decode rate as ``_concurrent``
    counts it."""
    # Not ``_long_prefix``'s text: the restart figure after this reads that one on an empty store.
    register = "\n".join(f"Entry {i}: the lamp at station {i} was lit at dusk, trimmed at midnight and put out at "
                         f"dawn, and the keeper wrote the oil it burned." for i in range(112))
    system = {"role": "system", "content": "You keep the lighthouse register. It reads:\n" + register}
    prompts = [[system, {"role": "user", "content": f"{PROMPT} Chapter {i + 1}."}] for i in range(PARALLEL)]
    _clear(engine)
    out = {"concurrent_deep_decode_tokens_per_s": _all_decoding_rate(
        _together(client, url, model, prompts, DEEP_TOKENS, None)[0])}
    if peer_url:
        out["llama_server_concurrent_deep_decode_tokens_per_s"] = _all_decoding_rate(
            _together(client, peer_url, "model", prompts, DEEP_TOKENS, {"cache_prompt": False})[0])
        out["concurrent_deep_vs_llama_server"] = (out["concurrent_deep_decode_tokens_per_s"]
                                                  / max(out["llama_server_concurrent_deep_decode_tokens_per_s"], 1e-9))
    return out


def _all_decoding_rate(results: list[dict[str, Any]]) -> float:
    """Tokens per second over the stretch where every stream was decoding (from the last stream's first token
    to the first stream's last): what raw batched decode counts, all sequences in every step. The requests
    join the batch a step or two apart and leave it as they finish, which a count from the request includes."""
    start = max(float(r["first_at"]) for r in results)
    end = min(float(r["last_at"]) for r in results)
    if end <= start:
        return 0.0
    inside = sum(1 for r in results for t in r["times"] if start < t <= end)
    return inside / (end - start)


def _long_prefix() -> list[dict[str, str]]:
    """A system prompt of about 4096 tokens and a short question."""
    rules = "\n".join(f"Rule {i}: a report on site {i} names its author, its date, the tool it used and every "
                      f"figure it measured, with units." for i in range(128))
    return [{"role": "system", "content": "You are the project's careful assistant. The handbook:\n" + rules},
            {"role": "user", "content": "Who signs a report?"}]


def _raw_ceiling(engine: Any, n_tokens: int) -> dict[str, float]:
    # raw llama-cpp-python in this process, as bench decode's baseline (docs/architecture.md)
    from hisho.engine.measure.rawbench import batched_decode

    params = engine.load_params
    prompts = [engine.tokenize(messages=[{"role": "user", "content": f"{PROMPT} Chapter {i + 1}."}])
               for i in range(PARALLEL)]
    raw = batched_decode(params, prompts, n_tokens)
    return {"raw_one_tokens_per_s": raw["tokens_per_s_1"],
            "raw_batched_tokens_per_s": raw[f"tokens_per_s_{PARALLEL}"], "raw_batched_gain": raw["gain"]}
