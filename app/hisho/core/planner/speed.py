"""How fast a model answers on this machine: decode tok/s (short and at depth) and prompt tok/s, predicted from
a GGUF's header and the machine's measured speed profile, replaced by what a loaded model measured.

The model (docs/planner.md "Speed"):

- **Decode** reads every matrix weight once per token (the token embedding only one row) and, at depth d, the
  KV cache of d tokens: a step takes ``step_s + (weights + kv_factor * d * kv_per_token) / bandwidth``, where
  ``kv_factor`` (>= 1) is what attention at depth costs beyond reading its KV (the scores and their softmax),
  fitted from the profile's measurements 4K tokens deep (``fit_kv_factor``). ``bandwidth`` is
  memory bandwidth as decode sees it (threads, caches and kernels included), ``step_s`` the fixed cost of a
  step (graph, sampling, thread wake-up): both fitted from two models of different sizes (``fit_decode``).
- **Prompt** is compute bound: a prompt token costs ``prompt_step_s`` plus one multiply-add per matrix weight
  at the machine's ``"all"`` rate (multiply-adds per second), fitted like decode from two model sizes. A weight
  type measured on a model of its own has its own rate, taken in proportion (the whole per-token time of that
  model over its multiply-adds, no fixed part): the fixed part fitted on the two small models (a 135M model's
  per-token work outside its matrices) does not carry to a larger one, whose per-token work outside the
  matrices grows with it (a 3B Q4_K_M shape read prompts at 0.71 of the prediction with it subtracted, 1B
  Q4_K_M measured). Lacking both, the slowest rate known.
- **Measured beats predicted.** ``record`` keeps what a loaded model measured (by the file's header digest);
  ``for_model`` answers with it, saying "measured", before any prediction.

Rules of use: no llama_cpp here; the measuring is ``hisho bench speed`` (bench/speed.py), or at a fresh home's
first start ``first_speed`` (one model, a few seconds), which store the profile with ``save_profile``. Everything
else reads it: ``load_profile()`` is None until then, and callers show no speed rather than a guess.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.atomic import write_text_atomic
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner.layout import Config
from hisho.core.planner.memory import kv_bytes

log = logging.getLogger("hisho.planner")

FIGURES = ("decode_short", "decode_4k", "prompt")
DEPTH_4K = 4096
SPEED_FLOOR = 8.0  # tok/s: a reply slower than this reads as "stuck" to most people (the recommendation's floor)


@dataclass(frozen=True)
class SpeedProfile:
    """This machine's speed, as decode and prompt processing see it."""

    bandwidth: float                  # bytes/s
    step_s: float                     # seconds per decode step beyond reading bytes
    prompt_rate: dict[str, float] = field(default_factory=dict)  # weight type or "all" -> multiply-adds per second
    threads: int = 0
    prompt_step_s: float = 0.0        # seconds per prompt token beyond its multiply-adds
    kv_factor: float = 1.0            # attention at depth over reading its KV (1: only the bytes)
    source: str = "measured"          # measured (hisho bench speed) | first-start | a fixture's name
    # Weight type -> bytes/s as decode reads that type, where a model mostly of it was measured: a k-quant's
    # dot products cost more per byte than Q4_0's repacked kernels, so on few cores its decode is not bound by
    # memory alone. Other types read at ``bandwidth``.
    type_bandwidth: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeedProfile:
        return cls(bandwidth=float(data["bandwidth"]), step_s=float(data["step_s"]),
                   prompt_rate={str(k): float(v) for k, v in dict(data.get("prompt_rate", {})).items()},
                   threads=int(data.get("threads", 0)), source=str(data.get("source", "measured")),
                   prompt_step_s=float(data.get("prompt_step_s", 0.0)),
                   kv_factor=float(data.get("kv_factor", 1.0)),
                   type_bandwidth={str(k): float(v) for k, v in dict(data.get("type_bandwidth", {})).items()})


@dataclass(frozen=True)
class Speed:
    decode_short: float   # tok/s, a reply at the start of a chat
    decode_4k: float      # tok/s, a reply 4,096 tokens into a chat
    prompt: float         # tok/s reading a message
    how: str              # "measured" | "predicted"

    def read_s(self, n_tokens: int = 1000) -> float:
        return n_tokens / self.prompt if self.prompt > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reads_1000_tokens_s": round(self.read_s(), 1)}

    def label(self) -> str:
        """'~12 tok/s · reads 1,000 tokens in ~9 s' (with 'measured' when it was)."""
        seen = " measured" if self.how == "measured" else ""
        return f"~{self.decode_short:.0f} tok/s{seen} · reads 1,000 tokens in ~{self.read_s():.0f} s"


def weights_read_per_token(facts: ModelFacts) -> int:
    """Bytes a decode step reads of the weights: all of them but the token embedding (one row is read), which
    a tied model reads in full as its output layer."""
    embd = facts.tensor_bytes.get("token_embd", 0)
    return facts.weights_bytes - (0 if facts.tied_embeddings else embd)


def matmul_elements(facts: ModelFacts) -> int:
    """Multiply-adds per prompt token: one per matrix weight (``matmul_weights``: every block's matrices and
    the output layer, a tied embedding's included; the embedding lookup costs none)."""
    total = 0
    for key, count in facts.matmul_weights.items():
        parts = key.split(":")
        total += count * _elements(parts[-4], int(parts[-1]))
    return total or facts.n_params


def _elements(qtype: str, nbytes: int) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    except KeyError:
        return nbytes  # an unknown type: about one byte per weight
    return nbytes // size * block


def main_type(facts: ModelFacts) -> str:
    """The weight type most of the matrix bytes are in (Q4_K for a Q4_K_M file)."""
    by: dict[str, int] = {}
    for key, count in facts.matmul_weights.items():
        parts = key.split(":")
        by[parts[-4]] = by.get(parts[-4], 0) + count * int(parts[-1])
    return max(by, key=lambda k: by[k]) if by else facts.quant


def predict(facts: ModelFacts, profile: SpeedProfile, *, type_kv: str = "f16") -> Speed:
    """Predicted decode (short, at 4K) and prompt tok/s of ``facts`` on a machine with ``profile``."""
    weights = weights_read_per_token(facts)
    kv_4k = kv_4k_bytes(facts, type_kv)
    kind = main_type(facts)
    weight_bw = profile.type_bandwidth.get(kind, profile.bandwidth)

    def decode(kv: int) -> float:
        return 1.0 / (profile.step_s + weights / weight_bw + profile.kv_factor * kv / profile.bandwidth)

    return Speed(decode_short=decode(0), decode_4k=decode(kv_4k), prompt=prompt_speed(profile, kind,
                                                                                      matmul_elements(facts)),
                 how="predicted")


def with_type(profile: SpeedProfile, facts: ModelFacts, decode_short: float, prompt: float) -> SpeedProfile:
    """``profile`` plus the decode bandwidth and prompt rate of ``facts``'s main weight type, from one model of
    that type measured here (its step and per-token costs are the machine's, already fitted)."""
    import dataclasses

    kind = main_type(facts)
    rates, bandwidths = dict(profile.prompt_rate), dict(profile.type_bandwidth)
    if prompt > 0:
        rates[kind] = matmul_elements(facts) * prompt  # in proportion: no fixed part (see the module's doc)
    if decode_short > 0 and 1.0 / decode_short > profile.step_s:
        bandwidths[kind] = weights_read_per_token(facts) / (1.0 / decode_short - profile.step_s)
    return dataclasses.replace(profile, prompt_rate=rates, type_bandwidth=bandwidths)


def decode_when_full(facts: ModelFacts, fast: Speed, n_ctx: int, type_kv: str = "f16") -> float:
    """Decode tok/s with ``n_ctx`` tokens of ``type_kv`` KV in the chat, from ``fast`` (measured or predicted,
    short and 4K deep with f16 KV): a step's time grows with the KV it reads (the window's cells only, on a
    sliding-window model), so the time per token is extrapolated along the KV bytes."""
    if fast.decode_short <= 0 or fast.decode_4k <= 0:
        return 0.0
    short, deep = 1.0 / fast.decode_short, 1.0 / fast.decode_4k
    at_4k = kv_4k_bytes(facts)
    read = kv_bytes(facts, Config(n_ctx=n_ctx, type_k=type_kv, type_v=type_kv))
    return 1.0 / (short + max(0.0, deep - short) * (read / at_4k if at_4k else 0.0))


def prompt_speed(profile: SpeedProfile, weight_type: str, elements: int) -> float:
    """Prompt tok/s of a model with ``elements`` multiply-adds per token, mostly of ``weight_type``."""
    own = profile.prompt_rate.get(weight_type) if weight_type != "all" else None
    if own:
        return own / elements if elements > 0 else 0.0  # a type's own rate is taken in proportion
    rate = profile.prompt_rate.get("all") or min(profile.prompt_rate.values(), default=0.0)
    return 1.0 / (profile.prompt_step_s + elements / rate) if rate > 0 else 0.0


def kv_4k_bytes(facts: ModelFacts, type_kv: str = "f16") -> int:
    """Bytes of KV a decode step reads 4,096 tokens into a chat."""
    return kv_bytes(facts, Config(n_ctx=DEPTH_4K, type_k=type_kv, type_v=type_kv))


def fit_kv_factor(points: list[tuple[int, float, float]], bandwidth: float) -> float:
    """``kv_factor`` from [(KV bytes at 4K, decode tok/s short, decode tok/s at 4K)]: the mean of what each
    model's step grew by at depth over what reading its KV alone would add; never below 1."""
    ratios = [(1 / deep - 1 / short) * bandwidth / kv for kv, short, deep in points if kv > 0 and deep > 0]
    return max(1.0, sum(ratios) / len(ratios)) if ratios else 1.0


def fit_decode(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(bandwidth, step_s) from decode measurements [(bytes read per step, tok/s)] of at least two sizes: the
    least-squares line of step time over bytes (its slope is 1 / bandwidth, its intercept the fixed cost).
    The same fit gives the prompt's (rate, prompt_step_s) from [(multiply-adds per token, tok/s)]."""
    if len({b for b, _ in points}) < 2:
        raise ValueError("a speed fit needs models of two sizes")
    xs = [float(b) for b, _ in points]
    ys = [1.0 / tps for _, tps in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    slope = max(slope, 1e-15)
    return 1.0 / slope, max(0.0, my - slope * mx)


# ----- stored: the machine's profile and the models' measured speeds ----------------------------------------


def _profile_path() -> Path:
    return paths.cache_dir() / "speed" / "profile.json"


def _measured_path() -> Path:
    return paths.cache_dir() / "speed" / "measured.json"


def load_profile(path: Path | None = None) -> SpeedProfile | None:
    """This machine's measured profile, or a recorded one at ``path`` (a fixture); None when not measured."""
    p = path or _profile_path()
    try:
        return SpeedProfile.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("speed profile %s unreadable (%s); no speeds shown", p, exc)
        return None


def save_profile(profile: SpeedProfile) -> None:
    write_text_atomic(_profile_path(), json.dumps(profile.to_dict(), indent=1))


def _measured() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(_measured_path().read_text(encoding="utf-8"))
        return {str(k): {str(f): float(v) for f, v in dict(d).items()} for k, d in dict(data).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def record(facts: ModelFacts, figure: str, tok_s: float) -> None:
    """Keep what a loaded model measured (``figure`` in ``FIGURES``), by its header's digest."""
    if figure not in FIGURES or not facts.header_sha or tok_s <= 0:
        return
    data = _measured()
    data.setdefault(facts.header_sha, {})[figure] = round(tok_s, 3)
    write_text_atomic(_measured_path(), json.dumps(data, indent=1))


def observe(facts: ModelFacts, *, prompt_tokens: int, cached_tokens: int, completion_tokens: int, ttft_s: float,
            tokens_per_s: float) -> None:
    """Keep what a real reply of a loaded model measured: its decode speed as ``decode_short`` (under 1,024
    tokens deep) or ``decode_4k`` (3K to 6K deep), its prompt speed where it read 256 tokens or more (the time
    to its first token, of the tokens not restored from cache)."""
    if completion_tokens >= 16 and tokens_per_s > 0:
        if prompt_tokens < 1024:
            record(facts, "decode_short", tokens_per_s)
        elif 3072 <= prompt_tokens <= 6144:
            record(facts, "decode_4k", tokens_per_s)
    read = prompt_tokens - cached_tokens
    if read >= 256 and ttft_s > 0:
        record(facts, "prompt", read / ttft_s)


def for_model(facts: ModelFacts, profile: SpeedProfile | None) -> Speed | None:
    """Measured speeds of this file where it has run here (each figure it measured), the prediction for the
    rest; None with neither."""
    seen = _measured().get(facts.header_sha, {}) if facts.header_sha else {}
    guess = predict(facts, profile) if profile is not None else None
    if not seen:
        return guess
    if guess is None and not all(f in seen for f in FIGURES):
        return None
    pick = {f: seen.get(f, getattr(guess, f, 0.0)) for f in FIGURES}
    return Speed(decode_short=pick["decode_short"], decode_4k=pick["decode_4k"], prompt=pick["prompt"],
                 how="measured")
