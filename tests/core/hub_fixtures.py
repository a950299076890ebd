"""Fixtures for the hub tests: a hub-shaped server on 127.0.0.1 with GGUF files written here by the ``gguf``
package (no weights are ever downloaded from anywhere)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from hisho_dev.hub_server import FakeHub
from tests.fixtures.gguf_shapes import LLAMA_31_8B, TINY_LLAMA, Shape, write_shape

GIB = 1024**3


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    server = FakeHub(page_size=10).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))   # never a real user's token or cache
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HISHO_NO_KEYRING", "1")
    yield server
    server.stop()


def write_payload_gguf(path: Path, mib: int, shape: Shape = TINY_LLAMA) -> Path:
    """A GGUF with a real header and ``mib`` MiB of non-zero tensor data (so a flipped byte changes the hash)."""
    write_shape(path, shape)
    size = max(path.stat().st_size, mib << 20)
    rng = np.random.default_rng(len(path.name))
    with path.open("r+b") as fh:
        head = len(fh.read(1 << 16))
        fh.seek(head)
        left = size - head
        while left > 0:
            n = min(left, 1 << 20)
            fh.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n
    return path


def write_split(folder: Path, stem: str, *, max_tensors: int = 3) -> list[Path]:
    """A real split GGUF (``STEM-0000k-of-0000n.gguf``) written by the gguf package."""
    import gguf

    folder.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(folder / f"{stem}.gguf"), "llama", split_max_tensors=max_tensors)
    w.add_block_count(2)
    w.add_context_length(2048)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_file_type(7)  # Q8_0
    for i in range(2):
        for n in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(f"blk.{i}.{n}.weight", np.ones((64, 64), dtype=np.float32))
    w.add_tensor("token_embd.weight", np.ones((100, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sorted(folder.glob(f"{stem}-*-of-*.gguf"))


def big_model(folder: Path) -> Path:
    """A sparse ~4.5 GB file whose header declares Llama-3.1-8B's tensors (a few KiB on disk)."""
    folder.mkdir(parents=True, exist_ok=True)
    return write_shape(folder / "Llama-8B-Q4_K_M.gguf", LLAMA_31_8B)


def environ_for_child(hub: FakeHub) -> dict[str, str]:
    env = dict(os.environ)
    env["HF_ENDPOINT"] = hub.url
    app = str(Path(__file__).resolve().parents[2] / "app")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (app, env.get("PYTHONPATH", "")) if p)
    return env


def run_in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``fn`` (a download, mostly) on its own thread; what it raises is handed to the test thread."""
    got: list[BaseException] = []

    def work() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            got.append(exc)

    t = threading.Thread(target=work)
    t.start()
    return t, got
