"""Bad model files: one clear line on stderr, exit 2, no traceback, and the engine never stays wedged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.errors import EngineError


def _truncated_copy(src: Path, dest: Path, fraction: float) -> Path:
    data = src.read_bytes()
    dest.write_bytes(data[: int(len(data) * fraction)])
    return dest


def _bad_files(tmp: Path, model: Path) -> dict[str, Path]:
    (tmp / "empty.gguf").write_bytes(b"")
    (tmp / "text.gguf").write_text("this is not a model\n" * 100)
    (tmp / "header_only.gguf").write_bytes(model.read_bytes()[:64])
    return {
        "missing": tmp / "nope.gguf",
        "zero-byte": tmp / "empty.gguf",
        "not GGUF": tmp / "text.gguf",
        "damaged header": tmp / "header_only.gguf",
        "truncated tensor data": _truncated_copy(model, tmp / "half.gguf", 0.5),
    }


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HISHO_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "hisho.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("case", ["missing", "zero-byte", "not GGUF", "damaged header", "truncated tensor data"])
def test_generate_with_bad_model_exits_2_with_one_line(case: str, tmp_path: Path, default_model_path: Path) -> None:
    path = _bad_files(tmp_path, default_model_path)[case]
    proc = run_cli("generate", "Hello", "--model", str(path), "--json", home=tmp_path / "home")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hisho: error: ")
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_engine_survives_loading_a_truncated_file_directly(tmp_path: Path, default_model_path: Path) -> None:
    """Skip our own header check and hand llama.cpp the damaged file: the engine either refuses it or dies, and
    either way the next load of a good file works in a live engine."""
    bad = _truncated_copy(default_model_path, tmp_path / "cut.gguf", 0.7)
    with EngineClient() as client:
        with pytest.raises(EngineError) as info:
            client.load(LoadParams(model_path=str(bad), n_ctx=512))
        assert info.value.kind in ("model_load", "crashed")
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        result = client.generate(messages=[{"role": "user", "content": "Hi"}],
                                 sampling=Sampling(temperature=0.0, max_tokens=4)).collect()
        assert result.completion_tokens > 0


def test_generate_json_fresh_home(tmp_path: Path) -> None:
    proc = run_cli("generate", "Hello", "--json", "--temperature", "0", "--max-tokens", "16", home=tmp_path / "fresh")
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert set(data) >= {"text", "prompt_tokens", "completion_tokens", "ttft_s", "tokens_per_s"}
    assert data["completion_tokens"] > 0
    assert data["text"].strip()
    # The bundled model was registered in the fresh store without any download.
    listing = run_cli("models", "list", "--json", home=tmp_path / "fresh")
    assert json.loads(listing.stdout)[0]["source"] == "bundled"


def test_version(tmp_path: Path) -> None:
    from hisho import __version__

    proc = run_cli("--version", home=tmp_path)
    assert proc.returncode == 0
    assert __version__ in proc.stdout
