"""Flash attention on or off, as measured on this machine for this model (docs/flash-attention.md, "Measured
here").

The fixed rule (``search.attention_off_ubatch``) turns flash attention off on a CPU-only load with an f16 cache;
on some machines a prompt reads faster with it on while a decode step at depth is slower. The engine times both
(``hisho.engine.measure.attention``: one prompt ubatch and one decode step at a depth, with flash attention on at
the load's ubatch and off at the rule's ubatch, on a synthetic cache) and the answer is kept here, beside the
planner's calibrations: per model file (path, size, mtime), context bucket, threads and llama.cpp build.
``choose`` weighs the two timings by what a front end does (``WORKLOADS``: tokens read and generated per
typical request), so ``search.attention_choice`` (the plan and the load alike) takes flash attention on only
where that request would finish sooner with it. Nothing measured: the fixed rule.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hisho.core.atomic import write_text_atomic
from hisho.core.planner.kept_file import kept_file
from hisho.core.planner.layout import Config

log = logging.getLogger("hisho.planner")

# Tokens read and generated per typical request of each kind of load (a choice, documented in
# docs/flash-attention.md): a chat turn reads a question (and now and then a pasted page) and writes a reply;
# a one-shot load (summarize, generate) reads a document chunk and writes a short summary; an API request
# carries a system prompt, tool definitions or retrieved text, and is answered briefly.
WORKLOADS: dict[str, tuple[int, int]] = {
    "window": (200, 300),
    "one-shot": (4000, 150),
    "serve": (3000, 150),
}
# Flash attention on must finish the request this much sooner to be chosen: off is the rule the measurement
# replaces, and a difference inside the noise of a few repetitions should not flip the KV fingerprint.
MARGIN = 0.03
MAX_DEPTH = 4096        # the depth measured: half the context, at most this (the cost grows with depth)
# The second, short depth measured beside it (where the deep one is at least 4 times as deep): a chat's first
# turns and an API's short requests run there, and flash attention's cost against the other way's is not the
# same at both ends (docs/flash-attention.md, "Two depths, and a serving load's sequences").
SHALLOW_DEPTH = 256
MIN_BUCKET = 2048
PROBE_TIMEOUT_S = 300
PROBE_VERSION = 2   # 2: the shallow depth, and a serving load's sequences (a version-1 record is measured again)
# In the environment of the app's own engine (services.make_engine): seconds without a request after a load
# before it measures (engine/measure/attention.py). Benchmarks' and tests' engines leave it unset (or "0"), so
# no measurement runs beside what they time.
IDLE_ENV = "HISHO_ENGINE_MEASURE_IDLE"
IDLE_S = 30.0


def workload(cfg: Config) -> str:
    """The kind of load ``cfg`` is, from its shape (profiles.SHAPES), so that the plan of a profile and the
    load of its front end weigh alike: one stream per sequence is the API's server, a load that saves KV the
    window (or ``hisho chat``), anything else a one-shot load (``summarize``, ``generate``)."""
    if not cfg.kv_unified:
        return "serve"
    return "window" if cfg.saves_kv else "one-shot"


def bucket(n_ctx: int) -> int:
    """The context bucket a measurement stands for: the power of two at or above ``n_ctx``."""
    return max(MIN_BUCKET, 1 << (max(1, n_ctx) - 1).bit_length())


def sequences(n_seq_max: int, kv_unified: bool) -> int:
    """The sequences a decode step is measured with: a serving load's (one KV stream each: under load every one
    of them decodes in each step), else 1."""
    return 1 if kv_unified else max(1, n_seq_max)


def depth_for(n_ctx: int, seqs: int = 1) -> int:
    """The depth measured for a context of ``n_ctx`` tokens shared by ``seqs`` sequences: half the bucket of one
    sequence's share, at most ``MAX_DEPTH``."""
    return min(bucket(n_ctx // max(1, seqs)) // 2, MAX_DEPTH)


def shallow_for(depth: int) -> int:
    """The short depth measured beside ``depth``: ``SHALLOW_DEPTH`` where ``depth`` is at least four times that,
    else none (0)."""
    return SHALLOW_DEPTH if depth >= 4 * SHALLOW_DEPTH else 0


@dataclass(frozen=True)
class AttentionProbe:
    """Seconds for one prompt ubatch and for one decode step at ``depth`` cached cells, each way (lists: one
    per repetition, taken on and off in turn); the same at ``shallow`` cells (the ``*_shallow_s`` lists, empty
    where ``shallow`` is 0: only the deep depth was measured). ``seqs`` > 1: the decode step carried one token
    for each of that many sequences, each at the depth (a serving load's step while it answers that many)."""

    depth: int
    ubatch_on: int
    ubatch_off: int
    prompt_on_s: list[float]
    prompt_off_s: list[float]
    decode_on_s: list[float]
    decode_off_s: list[float]
    shallow: int = 0
    prompt_on_shallow_s: list[float] = field(default_factory=list)
    prompt_off_shallow_s: list[float] = field(default_factory=list)
    decode_on_shallow_s: list[float] = field(default_factory=list)
    decode_off_shallow_s: list[float] = field(default_factory=list)
    seqs: int = 1

    def per_token(self, on: bool, shallow: bool = False) -> tuple[float, float]:
        """(seconds per prompt token, seconds per generated token) at the deep depth or the shallow one,
        medians."""
        end = "_shallow_s" if shallow else "_s"
        way = "on" if on else "off"
        prompt = _median(getattr(self, f"prompt_{way}{end}")) / (self.ubatch_on if on else self.ubatch_off)
        return prompt, _median(getattr(self, f"decode_{way}{end}"))

    def expected_s(self, on: bool, kind: str) -> float:
        """Seconds a typical request of ``kind`` (``WORKLOADS``) takes: at the measured depth, or, with the
        shallow depth measured too, the mean of the two (a front end's requests run anywhere from a nearly empty
        context to a deep one, and both costs grow about linearly with the depth)."""
        read, generated = WORKLOADS[kind]
        ends = (False, True) if self.shallow else (False,)
        total = 0.0
        for shallow in ends:
            prompt, decode = self.per_token(on, shallow)
            total += read * prompt + generated * decode
        return total / len(ends)

    def choose(self, kind: str) -> bool:
        """Flash attention on for ``kind``: its typical request finishes ``MARGIN`` sooner with it."""
        return self.expected_s(True, kind) < (1 - MARGIN) * self.expected_s(False, kind)

    def summary(self, kind: str) -> str:
        """What the plan's reason says of the measurement."""
        chosen = "on" if self.choose(kind) else "off"
        text = f"measured here at {self.depth} tokens: flash attention on {self._compared(False)}"
        if self.shallow:
            text += f"; at {self.shallow}: {self._compared(True)}"
        return f"{text}; {chosen} for {kind} requests"

    def _compared(self, shallow: bool) -> str:
        p_on, d_on = self.per_token(True, shallow)
        p_off, d_off = self.per_token(False, shallow)
        what = f"decodes {self.seqs} sequences at once" if self.seqs > 1 else "decodes"
        return f"reads prompts {_faster_slower(p_off / p_on)}, {what} {_faster_slower(d_off / d_on)}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "choices": {k: self.choose(k) for k in WORKLOADS}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionProbe:
        def floats(key: str, needed: bool = True) -> list[float]:
            values = [float(x) for x in data.get(key, [])]
            if (needed and not values) or (values and min(values) <= 0):
                raise ValueError(f"{key}: no positive timing")
            return values

        shallow = int(data.get("shallow", 0))
        return cls(depth=int(data["depth"]), ubatch_on=int(data["ubatch_on"]), ubatch_off=int(data["ubatch_off"]),
                   prompt_on_s=floats("prompt_on_s"), prompt_off_s=floats("prompt_off_s"),
                   decode_on_s=floats("decode_on_s"), decode_off_s=floats("decode_off_s"), shallow=shallow,
                   seqs=max(1, int(data.get("seqs", 1))),
                   **{key: floats(key, shallow > 0) for key in (
                       "prompt_on_shallow_s", "prompt_off_shallow_s", "decode_on_shallow_s", "decode_off_shallow_s")})


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _faster_slower(ratio: float) -> str:
    """``ratio``: the off time over the on time."""
    if ratio >= 1:
        return f"{(ratio - 1) * 100:.0f} % faster"
    return f"{(1 / ratio - 1) * 100:.0f} % slower"


def default_threads() -> int:
    """The threads the engine runs with at the default setting (physical cores; llama_setup.physical_cores)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unsupported platform
        n = None
    return max(1, n or os.cpu_count() or 1)


def cache_path(model_path: str, n_ctx: int, ubatches: tuple[int, int], threads: int, library: str,
               seqs: int = 1) -> Path:
    """Where the measurement is kept: model file (path, size, mtime), context bucket, the ubatches on and off,
    threads, llama.cpp build, the sequences decoded at once."""
    return kept_file("attention", model_path, bucket(n_ctx), f"{ubatches[0]}/{ubatches[1]}", threads, library,
                     PROBE_VERSION, seqs)


def recall(model_path: str, n_ctx: int, ubatches: tuple[int, int], threads: int | None = None, *,
           seqs: int = 1) -> AttentionProbe | None:
    """The kept measurement for this model at this context, these ubatches (on, off) and ``seqs`` sequences
    decoded at once (``sequences``), or None (never measured, or unreadable)."""
    from hisho.core.planner.calibrate import library_version

    if not Path(model_path).is_file():
        return None  # a hub file before its download: never measured
    path = cache_path(model_path, n_ctx, ubatches, threads or default_threads(), library_version(), seqs)
    try:
        return AttentionProbe.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("flash-attention measurement %s unreadable (%s); the fixed rule stands", path, exc)
        return None


def remember(model_path: str, n_ctx: int, probe: AttentionProbe, threads: int | None = None) -> Path:
    from hisho.core.planner.calibrate import library_version

    path = cache_path(model_path, n_ctx, (probe.ubatch_on, probe.ubatch_off), threads or default_threads(),
                      library_version(), probe.seqs)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(probe.to_dict()))
    return path


def measure(model_path: str, n_ctx: int, ubatch_on: int, ubatch_off: int, *, threads: int | None = None,
            repeats: int = 3, depth: int | None = None, seqs: int = 1,
            timeout: float = PROBE_TIMEOUT_S) -> AttentionProbe:
    """Run the engine's measurement in a child process (role ``attention-probe``) at ``depth`` (default:
    ``depth_for(n_ctx, seqs)``) and at ``shallow_for(depth)``, decode steps of ``seqs`` sequences (``sequences``),
    and keep its answer for a context of ``n_ctx`` tokens."""
    from hisho.core.planner.calibrate import ProbeFailed, child_answer

    threads = threads or default_threads()
    depth = depth or depth_for(n_ctx, seqs)
    request = {"model_path": model_path, "depth": depth, "shallow": shallow_for(depth), "ubatch_on": ubatch_on,
               "ubatch_off": ubatch_off, "threads": threads, "repeats": repeats, "seqs": max(1, seqs)}
    what = "flash-attention measurement"
    try:  # on any failure the fixed rule stands
        answer = child_answer("attention-probe", request=request, timeout=timeout, what=what)
    except OSError as exc:
        raise ProbeFailed(f"{what} failed: {exc}") from exc
    if not answer.get("ok"):
        raise ProbeFailed(f"{what} failed: {answer.get('error', 'unknown error')}")
    probe = AttentionProbe.from_dict(answer["probe"])
    remember(model_path, n_ctx, probe, threads)
    return probe
