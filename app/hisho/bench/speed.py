"""``hisho bench speed``: the planner's speed predictions against what the engine measures on this machine.

First the machine's speed profile (``core/planner/speed.py``) is measured, unless one is stored and ``--model``
picks a single file: decode and prompt speed of the bundled model and the true-shape Llama-3.2-1B Q4_0 give
memory bandwidth as decode sees it and the fixed cost of a step (two sizes), and the prompt rate of their weight
types; then the true-shape 1B Q4_K_M gives the k-quants' own decode bandwidth and prompt rate (their kernels do
more work per byte than Q4_0's repacked ones: without it the 3B Q4_K_M read prompts at half the predicted speed).
It is stored, so the window's badges and the first-run card can use it. Then each model (the bundled one, the
true-shape 1B Q4_0 and Q4_K_M and 3B Q4_K_M; ``--model`` picks one) is loaded as ``hisho generate`` loads it and
measured: ``decode_short`` (64 tokens after a short prompt), ``decode_4k`` (32 tokens after a 4,096-token
prompt), ``prompt`` (a 512-token prompt). Each row is the prediction, the measurement and their ratio; a row
whose model the profile was fitted on says ``fitted`` (decode short and prompt lie on lines through two points,
so their ratio is 1 by construction; decode at 4K shares one factor between the two); the 3B is held out (another
size of a measured type). The measured figures are recorded for the model (measured beats predicted).

JSON: ``{"rows": [{"model", "figure", "predicted_tok_s", "measured_tok_s", "ratio", "fitted"}…], "profile"}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import Sampling
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.models.store import ModelStore
from hisho.core.planner import speed
from hisho.core.planner.launch import load_params_for, open_model

MODELS = ("", "shape:llama-3.2-1b:Q4_0", "shape:llama-3.2-1b:Q4_K_M", "shape:llama-3.2-3b:Q4_K_M")
PROFILE_MODELS = MODELS[:2]          # the machine's bandwidth, step costs and prompt rate: two sizes
TYPE_MODELS = MODELS[2:3]            # then one model per weight type whose kernels run at their own speed
TEXT = ("The lighthouse keeper kept a log of every ship that passed, the weather, the colour of the sea at dawn "
        "and the birds that rested on the gallery rail. ")
PROMPT_TOKENS = 512


def run(args: argparse.Namespace) -> dict[str, Any]:
    specs = [args.model] if args.model else list(MODELS)
    measured: dict[str, tuple[ModelFacts, dict[str, float]]] = {}
    profile = speed.load_profile() if args.model else None
    if profile is None or profile.source == "first-start":  # one model's lower bounds: fit from two sizes
        for spec in PROFILE_MODELS:
            measured[spec] = measure(spec, repeat=max(1, args.repeat or 3))
        profile = profile_from([measured[s] for s in PROFILE_MODELS])
        for spec in TYPE_MODELS:
            measured[spec] = measure(spec, repeat=max(1, args.repeat or 3))
            facts, seen = measured[spec]
            profile = speed.with_type(profile, facts, seen["decode_short"], seen["prompt"])
        speed.save_profile(profile)
    rows: list[dict[str, Any]] = []
    for spec in specs:
        if spec not in measured:
            measured[spec] = measure(spec, repeat=max(1, args.repeat or 3))
        facts, seen = measured[spec]
        guess = speed.predict(facts, profile)
        for figure in speed.FIGURES:
            predicted, got = getattr(guess, figure), seen[figure]
            rows.append(row(Path(facts.source).name, figure, predicted, got,
                            fitted=spec in (*PROFILE_MODELS, *TYPE_MODELS) and not args.model))
            speed.record(facts, figure, got)
    return {"rows": rows, "profile": profile.to_dict()}


def row(model: str, figure: str, predicted: float, measured: float, *, fitted: bool) -> dict[str, Any]:
    """One row of the JSON; ``ratio`` is measured ÷ predicted (above 1: faster than predicted)."""
    return {"model": model, "figure": figure, "predicted_tok_s": round(predicted, 2),
            "measured_tok_s": round(measured, 2), "ratio": round(measured / predicted, 3) if predicted else None,
            "fitted": fitted}


def profile_from(runs: list[tuple[ModelFacts, dict[str, float]]]) -> speed.SpeedProfile:
    """The machine's profile from models of two sizes measured here: decode's bandwidth and step cost, the
    prompt's multiply-add rate and per-token cost (one rate for every weight type: a small model's prompt is
    mostly fixed cost, so a rate per type from it alone would read several times too slow)."""
    bandwidth, step_s = speed.fit_decode([(speed.weights_read_per_token(f), seen["decode_short"])
                                          for f, seen in runs])
    rate, prompt_step_s = speed.fit_decode([(speed.matmul_elements(f), seen["prompt"]) for f, seen in runs])
    kv_factor = speed.fit_kv_factor([(speed.kv_4k_bytes(f), seen["decode_short"], seen["decode_4k"])
                                     for f, seen in runs], bandwidth)
    return speed.SpeedProfile(bandwidth=bandwidth, step_s=step_s, prompt_rate={"all": rate},
                              threads=os.cpu_count() or 1, source="measured", prompt_step_s=prompt_step_s,
                              kv_factor=kv_factor)


def measure(spec: str, *, repeat: int = 3) -> tuple[ModelFacts, dict[str, float]]:
    """The three figures of one model, loaded as ``hisho generate`` loads it (one sequence, no KV kept)."""
    from hisho.bench.model_ids import resolve

    path = resolve(spec) or open_model(spec or None, ModelStore())
    facts = read_facts(path)
    params = load_params_for(path, n_ctx=speed.DEPTH_4K + 256)
    with EngineClient() as client:
        client.load(params)
        tokens = _tokens(client, speed.DEPTH_4K)
        prompt = statistics.median(_prompt(client, tokens[:PROMPT_TOKENS]) for _ in range(repeat))
        short = statistics.median(_decode(client, tokens[:16], 64) for _ in range(repeat))
        deep = _decode(client, tokens[:speed.DEPTH_4K], 32)
    return facts, {"decode_short": short, "decode_4k": deep, "prompt": prompt}


def _tokens(client: EngineClient, n: int) -> list[int]:
    one = client.tokenize(TEXT)
    return (one * (n // max(1, len(one)) + 1))[:n]


def _prompt(client: EngineClient, tokens: list[int]) -> float:
    client.seq_rm(0)
    stream = client.generate(tokens=tokens, sampling=Sampling(temperature=0.0, max_tokens=1, ignore_eos=True))
    for _ev in stream:
        pass
    result = stream.result
    return len(tokens) / result.ttft_s if result is not None and result.ttft_s > 0 else 0.0


def _decode(client: EngineClient, tokens: list[int], n: int) -> float:
    client.seq_rm(0)
    stream = client.generate(tokens=tokens, sampling=Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=n,
                                                              ignore_eos=True))
    for _ev in stream:
        pass
    return stream.result.tokens_per_s if stream.result is not None else 0.0
