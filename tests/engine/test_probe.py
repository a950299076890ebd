"""llama.cpp as the oracle: the no_alloc dry run agrees with our KV formulas exactly (default model, a sparse
Llama-3.1-8B-shaped file, a sparse Gemma-3-shaped file with sliding-window layers), the device list, one real
measured load, and ``hisho plan`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner.calibrate import calibrate, run_probe
from hisho.core.planner.memory import Config, estimate, kv_bytes, recurrent_bytes
from tests.fixtures.gguf_shapes import GEMMA3_4B, GRANITE_4_H, LFM2_350M, LLAMA_31_8B, MAMBA2, write_shape

MIB = 1024**2
CONFIGS = [(512, "f16"), (2048, "q8_0"), (8192, "q4_0")]


def dry_run(path: Path, configs: list[tuple[int, str]]) -> list[dict]:
    req = {"model_path": str(path), "touched": False,
           "contexts": [{"n_ctx": n, "type_k": t, "type_v": t, "flash_attn": True} for n, t in configs]}
    return run_probe("dry-run", req)["contexts"]


def probed_kv(entry: dict) -> int:
    return sum(c["bytes"] for c in entry["kv_caches"])


def close_to_log(ours: int, logged: int) -> bool:
    # llama.cpp prints MiB with two decimals ("%.2f"): ours, printed the same way, must read the same.
    return f"{ours / MIB:.2f}" == f"{logged / MIB:.2f}"


def test_default_model_kv_matches_dry_run(default_model_path: Path) -> None:
    facts = read_facts(default_model_path)
    for (n, t), entry in zip(CONFIGS, dry_run(default_model_path, CONFIGS)):
        assert entry["ok"]
        assert close_to_log(kv_bytes(facts, Config(n_ctx=n, type_k=t, type_v=t)), probed_kv(entry)), (n, t)


def test_llama_31_8b_shape_kv_matches_dry_run(tmp_path: Path) -> None:
    path = write_shape(tmp_path / "l8b.gguf", LLAMA_31_8B)  # sparse: a few KiB on disk
    entries = dry_run(path, [(8192, "f16"), (8192, "q8_0")])
    assert [probed_kv(e) for e in entries] == [1024 * MIB, 544 * MIB]
    facts = read_facts(path)
    assert kv_bytes(facts, Config(n_ctx=8192)) == 1024 * MIB


def test_gemma3_shape_sliding_window_matches_dry_run(tmp_path: Path) -> None:
    path = write_shape(tmp_path / "g3.gguf", GEMMA3_4B)
    facts = read_facts(path)
    configs = [(8192, "f16"), (8192, "q8_0"), (1024, "f16"), (32768, "q4_0")]
    for (n, t), entry in zip(configs, dry_run(path, configs)):
        assert entry["ok"], entry
        caches = entry["kv_caches"]
        if n > 1024:
            # Two caches: 5 global layers with every cell, 29 sliding layers with window + ubatch cells.
            assert [(c["layers"], c["cells"]) for c in caches] == [(5, n), (29, 1536)]
        assert close_to_log(kv_bytes(facts, Config(n_ctx=n, type_k=t, type_v=t)), probed_kv(entry)), (n, t)


def test_gemma3_shape_one_stream_per_sequence_matches_dry_run(tmp_path: Path) -> None:
    # The API's slots: kv_unified off, so every sequence has its own stream with its own window + ubatch.
    path = write_shape(tmp_path / "g3.gguf", GEMMA3_4B)
    facts = read_facts(path)
    req = {"model_path": str(path), "touched": False, "contexts": [
        {"n_ctx": 8192, "type_k": "f16", "type_v": "f16", "flash_attn": True, "n_seq_max": n, "kv_unified": u}
        for n, u in ((2, False), (3, False), (2, True))]}
    for spec, entry in zip(req["contexts"], run_probe("dry-run", req)["contexts"]):
        cfg = Config(n_ctx=8192, n_seq_max=int(spec["n_seq_max"]), kv_unified=bool(spec["kv_unified"]))
        assert entry["ok"], entry
        assert close_to_log(kv_bytes(facts, cfg), probed_kv(entry)), spec


@pytest.mark.parametrize("shape", [LFM2_350M, GRANITE_4_H, MAMBA2], ids=["lfm2", "granite-h", "mamba2"])
def test_hybrid_and_recurrent_state_matches_dry_run(tmp_path: Path, shape: object) -> None:
    """Attention KV only in the attention layers, plus the recurrent state (one per sequence), as llama.cpp
    allocates them for LFM2 (short conv), a Granite-4-H-like Mamba-2 hybrid and a pure Mamba-2."""
    path = write_shape(tmp_path / "h.gguf", shape)  # type: ignore[arg-type]
    facts = read_facts(path)
    configs = [(4096, "f16", 1), (8192, "q8_0", 1), (4096, "f16", 3)]
    req = {"model_path": str(path), "touched": False, "contexts": [
        {"n_ctx": n, "type_k": t, "type_v": t, "flash_attn": True, "n_seq_max": q} for n, t, q in configs]}
    for (n, t, q), entry in zip(configs, run_probe("dry-run", req)["contexts"]):
        assert entry["ok"], entry
        cfg = Config(n_ctx=n, type_k=t, type_v=t, n_seq_max=q)
        assert close_to_log(kv_bytes(facts, cfg), probed_kv(entry)), (n, t, q)
        [rs] = entry["rs_caches"]
        assert rs["cells"] == q
        assert close_to_log(recurrent_bytes(facts, cfg), rs["bytes"]), (n, t, q)


def test_devices_lists_the_cpu() -> None:
    answer = run_probe("devices", {})
    cpu = [d for d in answer["devices"] if d["type"] == "cpu"]
    assert cpu and cpu[0]["total"] > 0 and cpu[0]["free"] <= cpu[0]["total"]
    assert isinstance(answer["supports_gpu_offload"], bool)


def test_probe_refuses_a_broken_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    proc = subprocess.run([sys.executable, "-m", "hisho.engine.measure.probe", "dry-run"],
                          input=json.dumps({"model_path": str(bad), "contexts": []}), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert not proc.stdout.strip() or not json.loads(proc.stdout.strip().splitlines()[-1])["ok"]


@pytest.mark.slow
def test_real_load_matches_prediction(default_model_path: Path) -> None:
    """One bench cell: committed within 1 %, resident within 5 % and never more than 2 % under."""
    facts = read_facts(default_model_path)
    calib = calibrate(facts)
    cfg = Config(n_ctx=512)
    predicted = estimate(facts, cfg, calib)
    # As launch.load_params_for does: the plan tells the engine whether to map the file (left open, the engine
    # reads the header itself to decide, and that import costs ~7 MiB the plan does not count).
    params = LoadParams(model_path=str(default_model_path), n_ctx=512, n_threads=2, use_mmap=predicted.mmap)
    m = run_probe("measure", {"params": params.to_dict()}, timeout=600)
    assert m["filled"] == 512
    committed = sum(sum(m["buffers"][k].values()) for k in ("model", "KV", "compute", "output")) + m["our_arrays"]
    assert abs(predicted.committed - committed) / committed < 0.01
    err = (predicted.resident - m["peak_growth"]) / m["peak_growth"]
    assert -0.02 <= err <= 0.05, err


def test_hisho_plan_json_then_cached(default_model_path: Path, hisho_home: Path) -> None:
    # A pretend budget: the free RAM of a shared box moves between two runs, and the budget with it.
    cmd = [sys.executable, "-m", "hisho.cli.main", "plan", "--json", "--min-ctx", "1024", "--ram-gib", "4"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    plan = json.loads(first.stdout)
    assert plan["fits"] and not plan["estimate"] and plan["n_ctx"] >= 1024
    # The file's calibration, and its shape's (one dry run serves every quant of a model shape).
    cached = sorted((hisho_home / "cache" / "calibration").glob("*.json"))
    assert 1 <= len(cached) <= 2 and sum(p.name.startswith("shape-") for p in cached) <= 1, cached
    # A stamp no write can give it: a second dry run that rewrote a file within the file system's timestamp
    # granularity of the first (a fast machine) would otherwise leave st_mtime_ns as it was.
    stamp = 1_000_000_000 * 10**9
    for path in cached:
        os.utime(path, ns=(stamp, stamp))
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert json.loads(second.stdout) == plan
    assert sorted((hisho_home / "cache" / "calibration").glob("*.json")) == cached
    assert all(p.stat().st_mtime_ns == stamp for p in cached)  # answered from the cache, no second dry run


@pytest.mark.parametrize("args, message", [
    (["--ram-gib", "0"], "positive"),
    (["--ram-gib", "-3"], "positive"),
    (["--ram-gib", "100000"], "more than this machine"),
    (["--min-ctx", "10"], "at least 256"),
])
def test_hisho_plan_bad_budgets_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "hisho.cli.main", "plan", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_hisho_plan_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_text("nope")
    proc = subprocess.run([sys.executable, "-m", "hisho.cli.main", "plan", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "not a GGUF" in proc.stderr
