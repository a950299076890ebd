"""A download in a process of its own (core/hub/child.py), as the window runs it: progress comes back, pause
reaches the child, the outcome and failures are the same as in-process, a dying child is one line."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hisho.core.hub import Downloader, GatedRepo, HashMismatch, Progress, Stopped, repo_files
from hisho.core.hub import child as child_mod
from hisho.core.hub.child import run_child
from hisho.core.hub.download import target_dir
from hisho.core.models.store import ModelStore
from hisho.core.services import open_downloads, open_models
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub, write_payload_gguf

__all__ = ["hub"]
MIB = 1024**2
REPO = "org/Tiny-GGUF"


def serve(hub: FakeHub, tmp_path: Path, mib: int) -> Path:
    path = write_payload_gguf(tmp_path / "tiny-Q4_K_M.gguf", mib)
    hub.add_file(REPO, path.name, path)
    return path


def in_thread(dl: Downloader, job_id: int, seen: list[Progress]) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []

    def work() -> None:
        try:
            got.append(run_child(dl, job_id, seen.append))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            got.append(exc)

    t = threading.Thread(target=work)
    t.start()
    return t, got


def test_child_download_pauses_resumes_and_registers(hub: FakeHub, tmp_path: Path) -> None:
    src = serve(hub, tmp_path, 8)
    hub.throttle = 4 * MIB
    dl = open_downloads(open_models())
    job = dl.enqueue(repo_files(REPO)[0])
    seen: list[Progress] = []
    t, got = in_thread(dl, job.id, seen)
    deadline = time.monotonic() + 120
    while not any(p.done >= MIB for p in seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dl.running(job.id)
    dl.pause(job.id)  # in this process: passed on to the child
    t.join(30)
    assert isinstance(got[0], Stopped) and got[0].reason == "pause"
    assert dl.get(job.id).state == "paused"
    kept = dl.get(job.id).done_bytes
    assert 0 < kept < src.stat().st_size
    hub.throttle = None
    seen.clear()
    entry = run_child(dl, job.id, seen.append)
    assert Path(entry.path).read_bytes() == src.read_bytes()
    assert seen[0].resumed_from == kept and seen[-1].done == src.stat().st_size
    assert ModelStore().get(entry.name) is not None and dl.get(job.id).state == "done"


def test_child_failures_keep_their_kind(hub: FakeHub, tmp_path: Path) -> None:
    serve(hub, tmp_path, 2)
    hub.corrupt.add(f"{REPO}/tiny-Q4_K_M.gguf")
    dl = open_downloads(open_models())
    job = dl.enqueue(repo_files(REPO)[0])
    with pytest.raises(HashMismatch, match="arrived damaged"):
        run_child(dl, job.id)
    assert dl.get(job.id).state == "failed"
    hub.corrupt.clear()
    hub.repos[REPO].gated = True
    with pytest.raises(GatedRepo):
        run_child(dl, job.id)


def test_a_child_that_dies_is_one_line_and_the_job_can_resume(hub: FakeHub, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    src = serve(hub, tmp_path, 8)
    hub.throttle = MIB  # 8 s for the whole file: the kill lands before the end also on a loaded machine
    dl = open_downloads(open_models())
    job = dl.enqueue(repo_files(REPO)[0])
    pids: list[int] = []
    real = child_mod.subprocess.Popen

    def popen(*args: object, **kw: object) -> object:
        proc = real(*args, **kw)  # type: ignore[call-overload]
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(child_mod.subprocess, "Popen", popen)
    t, got = in_thread(dl, job.id, [])
    folder = target_dir(REPO)
    deadline = time.monotonic() + 120  # a child process starts slowly on a loaded machine

    def halfway() -> bool:
        return any(p.stat().st_size > MIB for p in folder.glob(".*.part")) and dl.get(job.id).state == "running"

    while time.monotonic() < deadline and not halfway():
        time.sleep(0.01)
    assert halfway()
    os.kill(pids[0], signal.SIGKILL)
    t.join(30)
    assert "stopped unexpectedly" in str(got[0]) and "Resume" in str(got[0])
    assert dl.get(job.id).state == "paused"
    hub.throttle = None
    entry = run_child(dl, job.id)
    assert Path(entry.path).read_bytes() == src.read_bytes()
