"""``hisho bench decode``: greedy decode through raw llama-cpp-python in-process vs through Hisho's engine process.

Both use the same model, prompt tokens, threads, context size and batch size. Repetitions are interleaved and
the order turns each time (raw, engine, gui; engine, gui, raw; gui, raw, engine; …) so drift in machine speed
hits all three alike. ``engine_vs_raw`` and ``gui_vs_raw`` are medians of the per-repetition ratios (``_paired``);
the ratios of the medians are reported next to them.

``--cpu-python PYTHON`` reads the long prompt on a third contestant: the same engine run by another interpreter,
the CPU build's venv beside a GPU build (``prompt_vs_cpu_build``, docs/vulkan.md).

``--background N`` adds a second phase in the same run: N busy processes (hisho.bench.background) started, the
same raw and engine runs again beside them (``loaded_*``; a raw run stops after ``LOADED_CAP_S``), then stopped.
``loaded_engine_vs_raw`` is the engine's decode over raw llama-cpp-python's with its defaults, both loaded;
``loaded_vs_quiet`` the engine loaded over the engine quiet (docs/threads.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from hisho.bench.background import busy_processes
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import Sampling, common_prefix
from hisho.core.models.store import ModelStore
from hisho.core.planner.launch import load_params_for, open_model

log = logging.getLogger("hisho.bench")

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a map in a bottle."


def run(args: argparse.Namespace) -> dict[str, Any]:
    from hisho.engine.lib.llama_setup import physical_cores
    from hisho.engine.measure.rawbench import RawModel  # the only llama_cpp user outside the engine process

    n_tokens = max(128, args.tokens or 256)
    repeat = max(1, args.repeat)
    background = max(0, int(getattr(args, "background", 0) or 0))
    model_path = open_model(args.model, ModelStore())
    params = load_params_for(model_path, n_ctx=2048)
    if getattr(args, "gpu_layers", None) is not None:
        params = dataclasses.replace(params, n_gpu_layers=max(0, int(args.gpu_layers)))
    sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=n_tokens, ignore_eos=True)
    with EngineClient() as client:
        # Raw gets the prompt offload the engine loaded with (with a partial offload, its probe's choice).
        params = dataclasses.replace(params, op_offload=client.load(params).get("op_offload"))
        prompt = client.tokenize(messages=[{"role": "user", "content": PROMPT}])
        long_prompt = client.tokenize(messages=[{"role": "user", "content": LONG_PROMPT}])
        raw = RawModel(params)
        cpu = _cpu_build_engine(args, params)
        try:
            reading = _reading(raw, client, long_prompt, repeat, cpu)
            quiet = _phase(raw, client, prompt, sampling, repeat, _gui_decoder())
            loaded = None
            if background:
                with busy_processes(background):
                    loaded = _phase(raw, client, prompt, sampling, repeat, None, cap_s=LOADED_CAP_S)
        finally:
            raw.close()
            if cpu is not None:
                cpu.close()
        engine_offloads = client.engine_info.get("supports_gpu_offload")
    raw_tps, eng_tps = quiet.raw_tps, quiet.eng_tps
    raw_med, eng_med = statistics.median(raw_tps), statistics.median(eng_tps)
    out: dict[str, Any] = {
        "model": str(model_path),
        "tokens": n_tokens,
        "prompt_tokens": len(prompt),
        "n_ctx": params.n_ctx,
        "n_gpu_layers": params.n_gpu_layers,
        "supports_gpu_offload": engine_offloads,
        **reading,
        "n_threads": params.n_threads or f"automatic, up to {physical_cores()}",
        "raw_n_threads": params.n_threads or physical_cores(),
        "repeat": repeat,
        "raw_tokens_per_s": round(raw_med, 2),
        "engine_tokens_per_s": round(eng_med, 2),
        "engine_vs_raw": _paired(eng_tps, raw_tps),
        "engine_vs_raw_of_medians": round(eng_med / raw_med, 4) if raw_med else None,
        "raw_runs": [round(x, 2) for x in raw_tps],
        "engine_runs": [round(x, 2) for x in eng_tps],
        "identical_prefix_tokens": common_prefix(quiet.raw_tokens, quiet.eng_tokens),
        "engine_threads": quiet.threads,
        **_gui_figures(quiet.gui_runs, raw_tps),
        "background": background,
    }
    if loaded is not None:
        out.update(_loaded_figures(loaded, eng_med))
    return out


def _cpu_build_engine(args: argparse.Namespace, params: Any) -> EngineClient | None:
    """The engine run by ``--cpu-python`` (the CPU build's interpreter) with the same load, no layer
    offloaded; None without it."""
    python = getattr(args, "cpu_python", None)
    if not python:
        return None
    cpu = EngineClient(python=str(python))
    try:
        info = cpu.load(dataclasses.replace(params, n_gpu_layers=0))
    except BaseException:
        cpu.close()
        raise
    log.info("CPU-build engine loaded (%s)", info.get("architecture", "?"))
    return cpu


# A prompt long enough that llama.cpp reads it in one batch of 32+ tokens: the path its op_offload concerns
# (docs/vulkan.md), ~250 tokens.
LONG_PROMPT = " ".join(f"Day {i}: the keeper logged the wind, the rain and {i * 3 + 1} passing ships." for i in range(18))


def _reading(raw: Any, client: EngineClient, prompt: list[int], repeat: int,
             cpu: EngineClient | None = None) -> dict[str, Any]:
    """Prompt reading speed (tokens per second to the first token, nothing cached) of the engine, of raw
    llama-cpp-python and, given ``cpu`` (the engine on another build: ``--cpu-python``), of that engine, taken in
    turns. Raw gets the prompt offload the engine sets (``RawModel``): with llama.cpp's default a GPU build with
    no layer offloaded reads on the device (docs/vulkan.md), which on a software device took longer than the
    whole bench. ``prompt_vs_cpu_build`` is the median of the per-turn ratios engine / CPU-build engine."""
    one = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=1, ignore_eos=True)
    runs: dict[str, list[float]] = {"engine": [], "raw": [], "cpu": []}

    def read(name: str) -> None:
        if name == "raw":
            runs["raw"].append(len(prompt) / raw.first_token(prompt))
            return
        who = client if name == "engine" else cpu
        if who is None:
            return
        who.seq_rm(0)
        result = who.generate(tokens=prompt, sampling=one).collect()
        runs[name].append(len(prompt) / result.ttft_s)

    order = ["engine", "raw", "cpu"]
    for i in range(repeat):
        for step in order[i % 3:] + order[:i % 3]:  # the order turns, as in _phase
            read(step)
    out: dict[str, Any] = {"long_prompt_tokens": len(prompt),
                           "engine_prompt_tokens_per_s": round(statistics.median(runs["engine"]), 2),
                           "raw_prompt_tokens_per_s": round(statistics.median(runs["raw"]), 2),
                           "engine_prompt_runs": [round(x, 2) for x in runs["engine"]]}
    if runs["cpu"]:
        out.update({"cpu_build_prompt_tokens_per_s": round(statistics.median(runs["cpu"]), 2),
                    "cpu_build_prompt_runs": [round(x, 2) for x in runs["cpu"]],
                    "prompt_vs_cpu_build": _paired(runs["engine"], runs["cpu"]),
                    "prompt_vs_cpu_build_of_medians": round(statistics.median(runs["engine"])
                                                            / statistics.median(runs["cpu"]), 4),
                    "cpu_build_supports_gpu_offload": (cpu.engine_info.get("supports_gpu_offload")
                                                       if cpu is not None else None)})
    return out


LOADED_CAP_S = 20.0  # raw decode beside busy programs can fall to ~1 tok/s: a run stops after this long


@dataclass
class _Phase:
    raw_tps: list[float] = field(default_factory=list)
    eng_tps: list[float] = field(default_factory=list)
    raw_tokens: list[int] = field(default_factory=list)
    eng_tokens: list[int] = field(default_factory=list)
    gui_runs: list[dict[str, float]] = field(default_factory=list)
    threads: dict[str, Any] = field(default_factory=dict)


def _phase(raw: Any, client: EngineClient, prompt: list[int], sampling: Sampling, repeat: int, gui: Any,
           cap_s: float = 0.0) -> _Phase:
    """``repeat`` interleaved repetitions of raw, engine (and gui) decode. ``cap_s``: a raw run stops after
    that many seconds (tokens per second over what it did)."""
    ph = _Phase()

    def run_raw() -> None:
        r = raw.decode(prompt, sampling.max_tokens, max_seconds=cap_s)
        ph.raw_tps.append(r["tokens_per_s"])
        ph.raw_tokens = r["tokens"]

    def run_engine() -> None:
        e = _engine_decode(client, prompt, sampling)
        ph.eng_tps.append(e["tokens_per_s"])
        ph.eng_tokens = e["tokens"]
        ph.threads = e["threads"]

    def run_gui() -> None:  # the same engine run while the chat view renders the stream
        if gui is not None:
            ph.gui_runs.append(gui(client, prompt, sampling))

    order = [run_raw, run_engine, run_gui]
    for i in range(repeat):
        # The order turns every repetition: a machine that slows down (or speeds up) within a
        # repetition, as these shared boxes do, does not always favour the same contestant.
        for step in order[i % 3:] + order[:i % 3]:
            step()
    return ph


def _loaded_figures(ph: _Phase, quiet_engine: float) -> dict[str, Any]:
    raw_med, eng_med = statistics.median(ph.raw_tps), statistics.median(ph.eng_tps)
    return {
        "loaded_raw_tokens_per_s": round(raw_med, 2),
        "loaded_engine_tokens_per_s": round(eng_med, 2),
        "loaded_engine_vs_raw": _paired(ph.eng_tps, ph.raw_tps),
        "loaded_engine_vs_raw_of_medians": round(eng_med / raw_med, 4) if raw_med else None,
        "loaded_vs_quiet": round(eng_med / quiet_engine, 4) if quiet_engine else None,
        "loaded_raw_runs": [round(x, 2) for x in ph.raw_tps],
        "loaded_engine_runs": [round(x, 2) for x in ph.eng_tps],
        "loaded_raw_tokens": len(ph.raw_tokens),
        "loaded_identical_prefix_tokens": common_prefix(ph.raw_tokens, ph.eng_tokens),
        "loaded_engine_threads": ph.threads,
    }


def _gui_decoder() -> Any:
    try:
        from hisho.gui.shell.stream_bench import gui_decode
    except ImportError:  # no PySide6: the figure is left out
        return None
    return gui_decode


def _paired(runs: list[float], raw: list[float]) -> float | None:
    """Median of the per-repetition ratios run / raw. Each repetition's runs are minutes apart at most, so a
    machine whose speed shifts between phases (seen here: 125 then 107 tok/s for several runs in a row) moves
    both sides of a pair alike; a ratio of medians would depend on how many runs fell in each phase."""
    pairs = [a / b for a, b in zip(runs, raw) if b > 0]
    return round(statistics.median(pairs), 4) if pairs else None


def _gui_figures(runs: list[dict[str, float]], raw_tps: list[float]) -> dict[str, Any]:
    if not runs:
        return {}
    tps = statistics.median(r["tokens_per_s"] for r in runs)
    raw_med = statistics.median(raw_tps)
    return {"gui_tokens_per_s": round(tps, 2),
            "gui_vs_raw": _paired([r["tokens_per_s"] for r in runs], raw_tps),
            "gui_vs_raw_of_medians": round(tps / raw_med, 4) if raw_med else None,
            "gui_runs": [round(r["tokens_per_s"], 2) for r in runs],
            "gui_render_share": round(statistics.median(r["render_share"] for r in runs), 4),
            "gui_flushes": [int(r["flushes"]) for r in runs]}


def _engine_decode(client: EngineClient, prompt: list[int], sampling: Sampling) -> dict[str, Any]:
    # Fresh sequence each time, as raw does (reset): the whole prompt is prefilled again.
    client.seq_rm(0)
    stream = client.generate(tokens=prompt, sampling=sampling)
    first = last = 0.0
    tokens: list[int] = []
    for ev in stream:
        last = time.perf_counter()
        if not first:
            first = last
        tokens.append(int(ev["token"]))
    threads = stream.result.extra.get("threads", {}) if stream.result is not None else {}
    return {"tokens_per_s": (len(tokens) - 1) / (last - first) if len(tokens) > 1 else 0.0, "tokens": tokens,
            "threads": threads.get("decode", {})}

