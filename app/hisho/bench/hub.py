"""``hisho bench hub``: the Models page's network figures against the hub-shaped server (hisho_dev.hub_server)
on 127.0.0.1, all in one run, in a temporary ``HISHO_HOME`` (nothing of the user's is touched, nothing is
downloaded from the internet: the files are written here with the ``gguf`` package).

- ``remote_header_bytes_ratio``: bytes read to plan a sparse 6.7 GB file whose header declares Llama-2-7B's
  tensors / its size (the fit verdict reads the header only);
- ``download_vs_curl``: our download of a 200 MB file (``hisho models pull``'s whole path: listing, HEAD,
  huggingface_hub's http_get, sha256 as it arrives, fsync, registry) / ``curl -o`` of the same URL, medians of
  interleaved repetitions (at least 5 pairs, the order swapped each time) at loopback speed (the server uses sendfile); ``download_vs_curl_on_link``: the same
  once with the server throttled to 100 MiB/s (a fast home connection);
- ``resume_resent_ratio``: a ``hisho models pull`` process SIGKILLed at 50 %, resumed in this process: bytes the
  server sent again / file size (the link throttled to 100 MiB/s, a fast home connection, so the kill lands where
  it is aimed); the median of ``--repeat`` kills, each one in ``resume_resent_ratio_runs``;
- ``gui_stall_ms``: the longest gap between ticks of a 5 ms timer on the GUI thread while the Models page plans
  the 7B file and downloads the 200 MB one (offscreen Qt; the download runs in its own process, as in the app).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.core.errors import UserError
from hisho.core.units import MIB

LINK = 100 * MIB  # bytes/s: the throttled comparison and the resume run
PAIRS = 5         # at least this many curl/ours pairs for download_vs_curl (one pair is a few seconds)
REPO = "bench/Llama-2-7B-GGUF"


LLAMA2_7B = (32, 4096, 11008, 32, 32, 32000)        # n_layer, n_embd, n_ff, n_head, n_head_kv, vocab
LLAMA2_13B = (40, 5120, 13824, 40, 40, 32000)
FILE_TYPES = {"Q4_K": 15, "Q8_0": 7, "F16": 1}       # LlamaFileType of a file whose weights are this type


def write_llama(path: Path, shape: tuple[int, ...] = LLAMA2_7B, wtype: str = "Q4_K") -> Path:
    """A sparse GGUF with a Llama-2 tensor table (weights of type ``wtype``), no tensor data written."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

    n_layer, n_embd, n_ff, n_head, n_head_kv, vocab = shape
    qt, f32 = GGMLQuantizationType[wtype], GGMLQuantizationType.F32
    kv = n_embd // n_head * n_head_kv
    tensors = [("token_embd.weight", (n_embd, vocab), qt), ("output_norm.weight", (n_embd,), f32),
               ("output.weight", (n_embd, vocab), qt)]
    for i in range(n_layer):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (n_embd,), f32), (b + "ffn_norm.weight", (n_embd,), f32),
                    (b + "attn_q.weight", (n_embd, n_embd), qt), (b + "attn_k.weight", (n_embd, kv), qt),
                    (b + "attn_v.weight", (n_embd, kv), qt), (b + "attn_output.weight", (n_embd, n_embd), qt),
                    (b + "ffn_gate.weight", (n_embd, n_ff), qt), (b + "ffn_up.weight", (n_embd, n_ff), qt),
                    (b + "ffn_down.weight", (n_ff, n_embd), qt)]
    w = GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(FILE_TYPES[wtype])
    data = 0
    for name, dims, qtype in tensors:
        block, size = GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(dims)) // block * size
        np_shape = list(reversed(dims))
        if qtype in (f32, GGMLQuantizationType.F16):
            dtype = np.float32 if qtype == f32 else np.float16
            w.add_tensor_info(name, tuple(np_shape), np.dtype(dtype), nbytes)
        else:
            np_shape[-1] = np_shape[-1] // block * size
            w.add_tensor_info(name, tuple(np_shape), np.dtype(np.uint8), nbytes, raw_dtype=qtype)
        data += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with path.open("r+b") as fh:
        fh.truncate(-(-path.stat().st_size // 32) * 32 + data)  # the data section starts 32-byte aligned
    return path


def write_payload(path: Path, mib: int) -> Path:
    """A GGUF of ``mib`` MiB: one random int8 tensor (random, so a flipped byte changes its hash)."""
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.random.default_rng(7).integers(-128, 128, mib * MIB, dtype=np.int8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _curl(url: str, out: Path) -> float:
    t = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-o", str(out), url], check=True)
    s = time.perf_counter() - t
    out.unlink()
    return s


def _ours(spec: str) -> float:
    from hisho.core.hub import Downloader, pull
    from hisho.core.models.store import ModelStore

    store = ModelStore()   # a benchmark is its own root
    t = time.perf_counter()
    entry = pull(spec, Downloader(store))
    s = time.perf_counter() - t
    store.remove(entry.name)
    return s


def _resume(hub: Any, spec: str, size: int, key: str) -> dict[str, Any]:
    from hisho.core.hub import Downloader
    from hisho.core.hub.download import target_dir

    hub.throttle = LINK
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, "-m", "hisho.cli.main", "models", "pull", spec], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = target_dir(spec.split(":")[0])
    before = hub.served.get(key, 0)
    deadline = time.monotonic() + 120
    kept = 0
    while time.monotonic() < deadline and child.poll() is None:
        parts = list(folder.glob(".*.part")) if folder.exists() else []
        if parts and parts[0].stat().st_size >= size // 2:
            child.send_signal(signal.SIGKILL)
            child.wait()
            kept = parts[0].stat().st_size
            break
        time.sleep(0.005)
    hub.throttle = None
    if not kept:
        raise RuntimeError("the pull finished before it could be killed at 50 %")
    from hisho.core.models.store import ModelStore

    dl = Downloader(ModelStore())   # a benchmark is its own root
    [job] = [j for j in dl.unfinished() if j.spec == spec]
    entry = dl.run(job.id)
    sent = hub.served[key] - before
    dl.store.remove(entry.name)
    return {"killed_at_bytes": kept, "bytes_sent_total": sent, "resume_resent_ratio": round((sent - size) / size, 6)}


def _gui_stall(spec_big_repo: str, spec_dl: str) -> float:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from hisho.core.executor import Executor
    from hisho.core.hub import repo_files
    from hisho.gui.models.models_page import ModelsPage
    from hisho.gui.shell.bridge import Bridge

    app = QApplication.instance() or QApplication([])
    from hisho.core.hub import Downloader
    from hisho.core.models.store import ModelStore

    workers = Executor(Bridge().post)
    store = ModelStore()   # a benchmark is its own root
    page = ModelsPage(workers, store, Downloader(store))
    page.show()
    clock = QElapsedTimer()
    clock.start()
    gaps = [0]
    last = [clock.elapsed()]

    def tick() -> None:
        now = clock.elapsed()
        gaps[0] = max(gaps[0], now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    repo, name = spec_dl.split(":")
    [f] = [q for q in repo_files(repo) if q.name == name]

    def pump(cond: Any, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.001)

    for _ in range(20):  # let the page's first listing settle before measuring
        app.processEvents()
        time.sleep(0.01)
    last[0] = clock.elapsed()
    gaps[0] = 0
    timer.start()
    page.hub.open_repo(spec_big_repo)
    page.download(f)
    pump(lambda: bool(page.hub.fits) and not page.downloads.queued and not workers.busy("download")
         and any(e.source == f"hub:{repo}" for e in page.entries))
    timer.stop()
    workers.shutdown(10)
    page.close()
    return float(gaps[0])


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        from hisho_dev.hub_server import FakeHub
    except ImportError:
        raise UserError("hisho bench hub runs from a source checkout: its hub-shaped server (hisho_dev) is a "
                        "developer tool the installed app leaves out") from None

    home = Path(tempfile.mkdtemp(prefix="hisho-bench-hub-"))
    saved = {k: os.environ.get(k) for k in ("HISHO_HOME", "HF_ENDPOINT", "HF_HOME", "HISHO_NO_KEYRING")}
    os.environ.update(HISHO_HOME=str(home / "home"), HF_HOME=str(home / "hf"), HISHO_NO_KEYRING="1")
    repeat = max(1, int(getattr(args, "repeat", 3) or 3))
    mib = int(getattr(args, "tokens", None) or 200)  # --tokens doubles as the payload size in MiB here
    try:
        files = home / "files"
        files.mkdir()
        big = write_llama(files / "llama-2-7b.Q4_K_M.gguf")
        payload = write_payload(files / "payload-Q8_0.gguf", mib)
        with FakeHub() as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            hub.add_file(REPO, big.name, big, sha256="7" * 64)  # never downloaded: the hash is not needed
            dl_repo = "bench/Payload-GGUF"
            f = hub.add_file(dl_repo, payload.name, payload)
            spec = f"{dl_repo}:{payload.name}"
            key = f"{dl_repo}/{payload.name}"

            from hisho.core import machine as machine_mod
            from hisho.core.hub import fit_files, repo_files

            m = machine_mod.detect()
            fits = fit_files([q for q in repo_files(REPO)], m.budget(), machine=m)
            header_ratio = fits[0].header_bytes / big.stat().st_size

            url = f"{hub.cdn}/cdn-lfs/{f.sha256}"
            curl_s, ours_s = [], []
            _curl(url, home / "warm.bin")
            for i in range(max(repeat, PAIRS)):  # interleaved pairs, the order swapped every time
                if i % 2:
                    ours_s.append(_ours(spec))
                    curl_s.append(_curl(url, home / "curl.bin"))
                else:
                    curl_s.append(_curl(url, home / "curl.bin"))
                    ours_s.append(_ours(spec))
            size = payload.stat().st_size
            hub.throttle = LINK  # the same comparison on a link as fast as a good home connection
            link_curl, link_ours = _curl(url, home / "curl.bin"), _ours(spec)
            hub.throttle = None
            kills = [_resume(hub, spec, size, key) for _ in range(repeat)]
            resume = sorted(kills, key=lambda k: k["resume_resent_ratio"])[len(kills) // 2]
            resume["resume_resent_ratio_runs"] = [k["resume_resent_ratio"] for k in kills]
            shutil.rmtree(home / "home" / "cache", ignore_errors=True)  # plan the 7B file again, uncached
            stall = _gui_stall(REPO, spec)
        return {
            "file_bytes_planned": big.stat().st_size,
            "header_bytes_read": fits[0].header_bytes,
            "remote_header_bytes_ratio": round(header_ratio, 6),
            "fit": fits[0].verdict,
            "download_bytes": size,
            "curl_s": round(statistics.median(curl_s), 4),
            "ours_s": round(statistics.median(ours_s), 4),
            "curl_mb_s": round(size / statistics.median(curl_s) / 1e6, 1),
            "ours_mb_s": round(size / statistics.median(ours_s) / 1e6, 1),
            "download_vs_curl": round(statistics.median(curl_s) / statistics.median(ours_s), 3),
            "download_vs_curl_runs": [round(c / o, 3) for c, o in zip(curl_s, ours_s)],
            "link_mb_s": round(LINK / 1e6, 1),
            "download_vs_curl_on_link": round(link_curl / link_ours, 3),
            **resume,
            "gui_stall_ms": stall,
            "repeat": repeat,
        }
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(home, ignore_errors=True)
