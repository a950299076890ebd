"""``hisho serve`` on loopback with the bundled model, once per module, in its own HISHO_HOME."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hisho.core import spawn

N_CTX = 1024     # per sequence
PARALLEL = 4


@dataclass
class Served:
    url: str
    key: str
    model: str
    home: Path
    proc: subprocess.Popen[str]


def _ends_with_pytest() -> None:
    """In the child before it runs: SIGTERM when the thread that started it (pytest's main thread) ends, so a
    killed or timed-out test run leaves no ``hisho serve`` (and through it no engine) behind."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG


def start_serve(home: Path, *args: str) -> Served:
    env = {**os.environ, "HISHO_HOME": str(home)}
    on_main = threading.current_thread() is threading.main_thread()    # PDEATHSIG follows the starting thread
    proc = subprocess.Popen([sys.executable, "-c", "from hisho.cli.main import main; raise SystemExit(main())", "serve", "--port", "0", "--n-ctx", str(N_CTX),
                             "--parallel", str(PARALLEL), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ends_with_pytest if on_main else None)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("hisho serve: "):
        proc.kill()
        pytest.fail(f"hisho serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    url = line.split()[2]
    model = line.split("(model ")[1].split(",")[0]
    key = (home / "config" / "api_key").read_text().strip() if "--api-key" not in args else \
        args[args.index("--api-key") + 1]
    return Served(url, key, model, home, proc)


def stop_serve(served: Served) -> None:
    spawn.stop_process(served.proc, 30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = start_serve(tmp_path_factory.mktemp("serve_home"))
    yield s
    stop_serve(s)


@pytest.fixture(scope="session")
def family_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled model's weights with each tool-call family's template and tokens (tests/fixtures/tool_models.py)."""
    from hisho.core.models.store import bundled_model_path
    from tests.fixtures.tool_models import rewrite

    source = bundled_model_path()
    assert source is not None
    root = tmp_path_factory.mktemp("tool_models")
    return {f: rewrite(source, root / f"{f}-test.gguf", f) for f in ("hermes", "llama3", "mistral", "harmony")}
