"""The engine's backends: a native build reports its built-in CPU backend; the bundle's entry point runs Hisho's
own modules as ``python -m`` would (that is how a frozen app starts the probe) and nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hisho.engine.lib import backends

ENTRY = Path(__file__).resolve().parents[2] / "packaging" / "entry.py"


def test_init_reports_the_cpu_backend_once() -> None:
    first = backends.init()
    assert backends.init() is first  # idempotent: llama.cpp is initialised once per process
    directory, variants = backends.find_variants()
    if directory is None:  # the developer's native build
        assert first.mode == "built-in" and first.cpu_variant == "built-in" and first.variants == []
    else:  # a distribution build (build/pkg-venv): one of the shipped variants runs here
        assert first.mode == "dynamic" and first.cpu_variant in first.variants
        assert first.variants == [backends.variant_name(p) for p in variants]


def test_bundle_entry_runs_the_probe_as_python_m_would() -> None:
    proc = subprocess.run([sys.executable, str(ENTRY), "-m", "hisho.engine.measure.probe", "devices"], input="{}",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["ok"] is True and any(d["type"] == "cpu" for d in answer["devices"])


def test_bundle_entry_refuses_foreign_modules() -> None:
    proc = subprocess.run([sys.executable, str(ENTRY), "-m", "http.server"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "only Hisho's own modules" in proc.stderr


def test_the_build_offers_no_amx_weights() -> None:
    # make install builds llama.cpp without AMX (its kernels crash on a prompt of a few dozen tokens on a CPU
    # that has it: docs/cpu-kernels.md); on a CPU without AMX the list never has it.
    backends.init()
    names = backends.extra_buffer_types()
    assert not [n for n in names if "AMX" in n.upper()], names
    assert backends.extra_buffers_allowed()


def test_amx_buffers_load_the_model_without_extra_buffer_types(monkeypatch: Any) -> None:
    from hisho.core.engine.protocol import LoadParams
    from hisho.engine.lib.llama_setup import model_params

    params = LoadParams(model_path="unused.gguf")
    assert model_params(params, mapped=True).use_extra_bufts is True
    monkeypatch.setattr(backends, "_extra", ["AMX", "CPU_REPACK"])
    assert backends.extra_buffers_allowed() is False
    assert model_params(params, mapped=True).use_extra_bufts is False
    monkeypatch.setattr(backends, "_extra", ["CPU_REPACK"])
    assert model_params(params, mapped=True).use_extra_bufts is True
