"""This machine's speed profile at first start, so a fresh home's first-run card and badges say a speed before
``hisho bench speed`` ever ran.

A few seconds in the probe child (``speed``: ``hisho.engine.measure.machine_speed``), never in the caller's
process, on the bundled model. ``hisho bench speed`` fits a step's fixed cost and its bytes from two model
sizes; here the two sizes are one model with and without its output layer, which llama.cpp computes only for
the rows asked for: the one-token step with the logit and without gives bandwidth (the output layer's bytes over
the time they add) and the fixed cost (the rest of the step); the prompt read with every logit and with the last
gives the multiply-add rate (the output layer's multiply-adds per token over the time they add) and the
per-token cost. Where a difference drowns in noise (a loaded machine) the fit falls back to lower bounds: the
whole step counted as reading the weights, the whole prompt token as its multiply-adds, so a larger model is
predicted no faster than it runs (the recommendation errs towards the smaller model). ``source`` says
``first-start``; ``hisho bench speed`` replaces it, and a loaded model's own measurements beat both
(``speed.for_model``).

Rules of use: ``wanted()`` then ``measure_and_keep(path)`` off the GUI thread; no Qt, no llama_cpp here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hisho.core.engine.protocol import LoadParams
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner import speed

log = logging.getLogger("hisho.planner")

SOURCE = "first-start"
TIMEOUT_S = 180.0  # a loaded 2-core box: loading and ~300 tokens of the bundled model, with a wide margin
N_CTX = 1024
ENV_OFF = "HISHO_MEASURE_AT_START"  # "0": never measure at start (the test suite's homes, by default)


def wanted() -> bool:
    """No profile is kept yet (and measuring at start is not turned off)."""
    return os.environ.get(ENV_OFF, "1") != "0" and speed.load_profile() is None


def output_layer(facts: ModelFacts) -> tuple[int, int]:
    """(bytes, multiply-adds per token) of the output layer (the token embedding again where tied)."""
    n_bytes = facts.tensor_bytes.get("output") or facts.tensor_bytes.get("token_embd", 0)
    return n_bytes, facts.vocab_size * facts.n_embd


def profile_from_one(facts: ModelFacts, answer: dict[str, float]) -> speed.SpeedProfile:
    """The profile the probe's ``answer`` for one model gives (module docstring: two sizes from its output layer,
    lower bounds where a difference is lost in noise)."""
    decode, prompt = float(answer["decode_tok_s"]), float(answer["prompt_tok_s"])
    if decode <= 0 or prompt <= 0:
        raise ValueError("the first-start measurement gave no speed")
    out_bytes, out_mults = output_layer(facts)
    weights, mults = speed.weights_read_per_token(facts), speed.matmul_elements(facts)
    step = 1.0 / decode
    bandwidth = weights / step  # the lower bound: every second of the step spent reading
    no_logit = float(answer.get("decode_no_logit_tok_s", 0.0))
    if no_logit > decode and out_bytes:
        bandwidth = max(bandwidth, out_bytes / (step - 1.0 / no_logit))
    per_token = 1.0 / prompt
    rate = mults / per_token
    every = float(answer.get("prompt_every_logit_tok_s", 0.0))
    if 0 < every < prompt and out_mults:
        rate = max(rate, out_mults / (1.0 / every - per_token))
    return speed.SpeedProfile(bandwidth=bandwidth, step_s=max(0.0, step - weights / bandwidth),
                              prompt_rate={"all": rate, speed.main_type(facts): rate},
                              threads=int(answer.get("threads", 0)), source=SOURCE,
                              prompt_step_s=max(0.0, per_token - mults / rate))


def measure(model_path: Path, timeout: float = TIMEOUT_S) -> speed.SpeedProfile:
    """Measure ``model_path`` (the bundled model) in the probe child; its profile. Raises ProbeFailed."""
    from hisho.core.planner.calibrate import run_probe

    params = LoadParams(model_path=str(model_path), n_ctx=N_CTX, n_batch=512, n_ubatch=512)
    answer = run_probe("speed", {"params": params.to_dict()}, timeout)
    return profile_from_one(read_facts(model_path), answer)


def measure_and_keep(model_path: Path) -> speed.SpeedProfile:
    """``measure`` and keep the profile in the home, unless one was stored meanwhile (a bench's is better)."""
    profile = measure(model_path)
    kept = speed.load_profile()
    if kept is not None:
        return kept
    speed.save_profile(profile)
    log.info("measured this computer at first start on %s: %.1f GB/s as decode sees it, %d threads",
             model_path.name, profile.bandwidth / 1e9, profile.threads)
    return profile
