"""The hub: the real huggingface_hub client against a hub-shaped server on 127.0.0.1 (hisho_dev.hub_server).

Search and paging, split files, the remote plan, downloads with progress, a download killed and resumed, a
damaged download, a full disk, a gated repository, the server going away, pause and cancel, offline mode.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from hisho.core.errors import UserError
from hisho.core.hub import (
    DiskFull,
    GatedRepo,
    HashMismatch,
    HubError,
    HubOffline,
    Stopped,
    fit_files,
    group_files,
    pull,
    repo_files,
    search,
)
from hisho.core.hub import download as download_mod
from hisho.core.hub import fetch as fetch_mod
from hisho.core.hub import token as token_mod
from hisho.core.machine import Machine
from hisho.core.models.store import ModelStore
from hisho.core.services import open_downloads, open_models
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import (
    big_model,
    environ_for_child,
    hub,
    run_in_thread,
    write_payload_gguf,
    write_split,
)
from tests.fixtures.gguf_shapes import TINY_LLAMA, Shape

__all__ = ["hub"]  # the fixture, imported for pytest
GIB, MIB = 1024**3, 1024**2
REPO = "org/Tiny-GGUF"


def machine(ram_gib: float) -> Machine:
    ram = int(ram_gib * GIB)
    return Machine(platform="linux", ram_total=ram, ram_available=ram, cpu_threads=4)


def serve_tiny(hub: FakeHub, tmp_path: Path, mib: int = 4, name: str = "tiny-Q4_K_M.gguf",
               repo: str = REPO, shape: Shape = TINY_LLAMA) -> Path:
    folder = tmp_path / "served" / repo.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path = write_payload_gguf(folder / name, mib, shape)
    hub.add_file(repo, name, path)
    return path


# ----- search --------------------------------------------------------------------------------------------------


def test_search_pages_follow_the_link_header(hub: FakeHub) -> None:
    for i in range(45):
        hub.add_repo(f"org{i % 3}/model{i:02d}-GGUF", downloads=1000 - i, likes=i)
    hub.add_repo("org/model-safetensors", downloads=10**6, tags=["safetensors"])  # not GGUF: never listed
    first = search("model", page=0)
    second = search("model", page=1)
    assert [r.repo for r in first] == [f"org{i % 3}/model{i:02d}-GGUF" for i in range(20)]
    assert [r.repo for r in second] == [f"org{i % 3}/model{i:02d}-GGUF" for i in range(20, 40)]
    # The server pages by 10: the client followed its Link header (2 pages for page 0, 4 for page 1).
    assert sum(1 for m, p in hub.requests if p.startswith("/api/models?")) == 2 + 4
    assert search("model", page=2)[-1].repo == "org2/model44-GGUF"
    assert search("model", sort="likes")[0].repo == "org2/model44-GGUF"
    assert search("no-such-thing") == []


# ----- files -------------------------------------------------------------------------------------------------


def test_split_files_are_one_entry_with_the_summed_size(hub: FakeHub, tmp_path: Path) -> None:
    parts = write_split(tmp_path / "split", "Model-Q8_0")
    assert len(parts) == 3
    for p in parts:
        hub.add_file("org/Split-GGUF", f"Q8_0/{p.name}", p)
    single = write_payload_gguf(tmp_path / "Model-Q4_K_M.gguf", 1)
    hub.add_file("org/Split-GGUF", "Model-Q4_K_M.gguf", single)
    hub.add_file("org/Split-GGUF", "mmproj-Model-F16.gguf", single)  # a vision projector: not a model
    hub.add_file("org/Split-GGUF", "README.md", tmp_path / "split" / parts[0].name, lfs=False)
    files = repo_files("org/Split-GGUF")
    assert [f.quant for f in files] == ["Q4_K_M", "Q8_0"] or [f.quant for f in files] == ["Q8_0", "Q4_K_M"]
    split = next(f for f in files if f.quant == "Q8_0")
    assert split.parts == [f"Q8_0/{p.name}" for p in parts]
    assert split.size == sum(p.stat().st_size for p in parts)
    assert split.name == f"Q8_0/{parts[0].name}"
    assert all(len(s) == 64 for s in split.sha256)
    # The plan of a split model counts the tensors of every part (token_embd lives in the last one here).
    fit = next(f for f in fit_files(files, machine(16).budget()) if f.file.quant == "Q8_0")
    assert fit.plan is not None and fit.plan["breakdown"]["weights"] == (6 * 64 * 64 + 100 * 64) * 4


def test_incomplete_split_is_left_out() -> None:
    files = group_files("o/r", [("m-00001-of-00002.gguf", 10, ""), ("x-Q4_0.gguf", 5, "")])
    assert [f.name for f in files] == ["x-Q4_0.gguf"]


def test_remote_plan_reads_only_the_header(hub: FakeHub, tmp_path: Path) -> None:
    big = big_model(tmp_path / "big")
    hub.add_file("org/Llama-8B-GGUF", big.name, big, sha256="a" * 64)  # never downloaded: hash not computed
    q2k = replace(TINY_LLAMA, weight_type=GGMLQuantizationType.Q2_K, file_type=10)  # LlamaFileType.MOSTLY_Q2_K
    tiny = serve_tiny(hub, tmp_path, 1, repo="org/Llama-8B-GGUF", name="Llama-8B-Q2_K.gguf", shape=q2k)
    files = repo_files("org/Llama-8B-GGUF")
    small = fit_files(files, machine(4).budget(), target_ctx=4096)
    by = {f.file.name: f for f in small}
    assert by[big.name].verdict == "wont_fit" and "needs" in by[big.name].why
    assert by[tiny.name].verdict == "fits" and by[tiny.name].recommended
    assert "best quality that fits" in by[tiny.name].why
    ratio = by[big.name].header_bytes / big.stat().st_size
    assert 0 < ratio < 0.001
    assert hub.served[f"org/Llama-8B-GGUF/{big.name}"] == by[big.name].header_bytes
    assert 8.0e9 < by[big.name].params < 8.1e9  # Llama-3.1-8B: 8,030,261,248 weights, from the header alone

    roomy = {f.file.name: f for f in fit_files(files, machine(64).budget(), target_ctx=4096)}
    assert roomy[big.name].verdict == "fits" and roomy[big.name].recommended  # Q4_K_M beats Q2_K
    assert roomy[big.name].plan is not None and roomy[big.name].plan["n_ctx"] == 4096
    # The window's load (two sequences, a buffer for saving a chat's KV): f16 KV needs 5.8 GiB, q8_0 4.9 GiB.
    tight = {f.file.name: f for f in fit_files(files, machine(6).budget(), target_ctx=4096)}
    assert tight[big.name].verdict == "tight" and "q8_0 KV" in tight[big.name].why


# ----- downloads -----------------------------------------------------------------------------------------------


def test_download_with_progress_registers_a_verified_model(hub: FakeHub, tmp_path: Path) -> None:
    src = serve_tiny(hub, tmp_path, 6)
    seen: list[download_mod.Progress] = []
    entry = pull(f"{REPO}:tiny-Q4_K_M.gguf", open_downloads(open_models()), progress=seen.append)
    assert Path(entry.path).read_bytes() == src.read_bytes()
    assert entry.source == f"hub:{REPO}" and entry.revision == hub.repos[REPO].commit
    assert entry.sha256 == hub.repos[REPO].files["tiny-Q4_K_M.gguf"].sha256
    assert (entry.arch, entry.quant, entry.n_ctx_train) == ("llama", "Q4_K_M", 4096)
    assert seen[-1].done == seen[-1].total == src.stat().st_size
    assert [p.done for p in seen] == sorted(p.done for p in seen) and len(seen) >= 2
    assert not list(Path(entry.path).parent.glob(".*.part"))
    assert ModelStore().get(entry.name) is not None
    assert open_downloads(open_models()).unfinished() == []


def test_a_killed_download_resumes_without_sending_much_again(hub: FakeHub, tmp_path: Path) -> None:
    src = serve_tiny(hub, tmp_path, 16)
    size = src.stat().st_size
    hub.throttle = 8 * MIB  # ~2 s for the file: time to kill it halfway
    child = subprocess.Popen([sys.executable, "-m", "hisho.cli.main", "models", "pull", f"{REPO}:tiny-Q4_K_M.gguf"],
                             env=environ_for_child(hub), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = download_mod.target_dir(REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        parts = list(folder.glob(".*.part")) if folder.exists() else []
        if parts and parts[0].stat().st_size >= size // 2:
            break
        assert child.poll() is None, child.communicate()
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    kept = parts[0].stat().st_size
    assert size // 2 <= kept < size
    sent_before = hub.served[f"{REPO}/tiny-Q4_K_M.gguf"]
    hub.throttle = None
    dl = open_downloads(open_models())
    [job] = dl.unfinished()
    assert job.state == "paused"  # the dead process left it 'running'
    seen: list[download_mod.Progress] = []
    entry = dl.run(job.id, seen.append)
    assert Path(entry.path).read_bytes() == src.read_bytes()
    assert seen[0].resumed_from == kept
    assert sent_before >= kept
    resent = hub.served[f"{REPO}/tiny-Q4_K_M.gguf"] - size  # what was in flight when the process died
    assert 0 <= resent <= 2 * MIB


def test_a_damaged_download_is_caught_by_the_hash(hub: FakeHub, tmp_path: Path) -> None:
    serve_tiny(hub, tmp_path, 2)
    hub.corrupt.add(f"{REPO}/tiny-Q4_K_M.gguf")
    with pytest.raises(HashMismatch, match="sha256 differs"):
        pull(f"{REPO}:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    folder = download_mod.target_dir(REPO)
    assert not list(folder.glob("*")) and not list(folder.glob(".*"))
    assert all(e.source == "bundled" for e in ModelStore().list())
    [job] = open_downloads(open_models()).unfinished()
    assert job.state == "failed" and "damaged" in job.error


def test_a_full_disk_is_refused_with_the_shortfall(hub: FakeHub, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = serve_tiny(hub, tmp_path, 2)
    monkeypatch.setattr(fetch_mod, "free_bytes", lambda folder: 10 * MIB)
    with pytest.raises(DiskFull) as err:
        pull(f"{REPO}:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    short = src.stat().st_size + fetch_mod.RESERVE - 10 * MIB
    assert f"({short / MIB:.0f} MiB short)" in str(err.value)
    assert hub.served.get(f"{REPO}/tiny-Q4_K_M.gguf", 0) == 0  # nothing was fetched


def test_gated_repository_needs_a_token(hub: FakeHub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hub.add_repo("meta/Gated-GGUF", gated=True)
    serve_tiny(hub, tmp_path, 1, repo="meta/Gated-GGUF")
    assert repo_files("meta/Gated-GGUF")  # the listing is public, the files are not
    with pytest.raises(GatedRepo, match="gated"):
        pull("meta/Gated-GGUF:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    token_mod.set_token("hf_wrong")
    with pytest.raises(GatedRepo):
        pull("meta/Gated-GGUF:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    where = token_mod.set_token(hub.token)
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o600
    entry = pull("meta/Gated-GGUF:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    assert entry.source == "hub:meta/Gated-GGUF"
    assert hub.token not in caplog.text and "hf_wrong" not in caplog.text


def test_server_going_away_keeps_the_partial_for_a_resume(hub: FakeHub, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = serve_tiny(hub, tmp_path, 8)
    size = src.stat().st_size
    hub.die_after = size // 2
    monkeypatch.setattr("time.sleep", lambda s: None)  # http_get waits 1 s between its 5 retries
    with pytest.raises(HubOffline, match="cannot reach the hub|broke off"):  # refused, or reset mid-body
        pull(f"{REPO}:tiny-Q4_K_M.gguf", open_downloads(open_models()))
    [job] = open_downloads(open_models()).unfinished()
    assert job.state == "failed"
    part = next(download_mod.target_dir(REPO).glob(".*.part"))
    assert part.stat().st_size == size // 2
    with FakeHub() as again:  # the hub is back (on another port)
        again.add_file(REPO, "tiny-Q4_K_M.gguf", src)
        monkeypatch.setenv("HF_ENDPOINT", again.url)
        entry = open_downloads(open_models()).run(job.id)
        assert again.served[f"{REPO}/tiny-Q4_K_M.gguf"] == size - size // 2
    assert Path(entry.path).read_bytes() == src.read_bytes()


def test_pause_then_cancel_removes_the_partial(hub: FakeHub, tmp_path: Path) -> None:
    serve_tiny(hub, tmp_path, 8)
    hub.throttle = 4 * MIB
    dl = open_downloads(open_models())
    job = dl.enqueue(next(f for f in repo_files(REPO)))
    t, got = run_in_thread(lambda: dl.run(job.id))
    while not dl.running(job.id) or not list(download_mod.target_dir(REPO).glob(".*.part")):
        time.sleep(0.01)
    time.sleep(0.3)
    dl.pause(job.id)
    t.join(10)
    assert isinstance(got[0], Stopped) and got[0].reason == "pause"
    assert dl.get(job.id).state == "paused"
    assert list(download_mod.target_dir(REPO).glob(".*.part"))
    dl.cancel(job.id)
    assert not list(download_mod.target_dir(REPO).glob(".*.part"))
    assert dl.unfinished() == []


def test_offline_mode_is_one_line(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubOffline, match="^Offline"):
        search("llama")
    hub.add_repo("org/x-GGUF")
    assert hub.requests == []


def test_unreachable_hub_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    down = FakeHub()
    url = down.url
    down.stop()
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    with pytest.raises(HubOffline, match="cannot reach the hub"):
        repo_files("org/x")


def test_spec_errors(hub: FakeHub, tmp_path: Path) -> None:
    serve_tiny(hub, tmp_path, 1)
    serve_tiny(hub, tmp_path, 1, name="tiny-Q8_0.gguf")
    with pytest.raises(UserError, match="expected REPO"):
        pull("nothing", open_downloads(open_models()))
    with pytest.raises(UserError, match="name one as"):
        pull(REPO, open_downloads(open_models()))
    with pytest.raises(UserError, match="no GGUF file 'x.gguf'"):
        pull(f"{REPO}:x.gguf", open_downloads(open_models()))
    with pytest.raises(HubError, match="no such repository"):
        pull("org/absent:x.gguf", open_downloads(open_models()))


# ----- registry and CLI ------------------------------------------------------------------------------------------


def test_models_json_is_migrated_once_and_kept(tmp_path: Path, hisho_home: Path) -> None:
    from tests.core.test_models_store import write_tiny_gguf

    tiny = write_tiny_gguf(tmp_path / "Old.gguf")
    legacy = hisho_home / "data" / "models.json"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text(json.dumps({"version": 1, "models": {"old": {"name": "old", "path": str(tiny),
                                                                      "size": 1, "source": "imported"}}}))
    store = ModelStore()
    assert store.get("old") is not None and legacy.exists()
    store.remove("old")
    assert ModelStore().get("old") is None  # not imported a second time
    assert tiny.exists()


def test_cli_search_files_pull_list(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hisho.cli.main import main

    serve_tiny(hub, tmp_path, 1)
    assert main(["models", "search", "tiny", "--json"]) == 0
    assert [r["repo"] for r in json.loads(capsys.readouterr().out)] == [REPO]
    assert main(["models", "files", REPO, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["fit"] in ("fits", "tight") and row["recommended"] and row["plan"]["n_ctx"] > 0
    assert main(["models", "pull", REPO]) == 0   # one file: no need to name it
    capsys.readouterr()
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["tiny-q4_k_m"]
    assert {k: row[k] for k in ("arch", "quant", "n_ctx_train", "source")} == \
        {"arch": "llama", "quant": "Q4_K_M", "n_ctx_train": 4096, "source": f"hub:{REPO}"}
    assert row["size_bytes"] > 0 and Path(row["path"]).is_file()
    assert main(["models", "files", "not-a-repo"]) == 2
    assert "OWNER/NAME" in capsys.readouterr().err


def test_plan_hf_repo_reads_headers_from_the_hub(hub: FakeHub, tmp_path: Path) -> None:
    """``hisho plan hf:REPO`` (the planner's own HfFileSystem path) against the same server, in a child process
    (huggingface_hub reads HF_ENDPOINT when it is imported)."""
    big = big_model(tmp_path / "big")
    hub.add_file("org/Llama-8B-GGUF", big.name, big, sha256="c" * 64)
    out = subprocess.run([sys.executable, "-m", "hisho.cli.main", "plan", "hf:org/Llama-8B-GGUF", "--json",
                          "--ram-gib", "4"], env=environ_for_child(hub), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["model"] == f"hf:org/Llama-8B-GGUF/{big.name}" and plan["fits"] is False
    # HfFileSystem reads ahead by its block size (a few MiB), still a sliver of the file
    assert hub.served[f"org/Llama-8B-GGUF/{big.name}"] < big.stat().st_size / 100


def test_one_badge_vocabulary_carries_speed() -> None:
    """A file that fits but would answer slower than the floor here is "Slow here", on every screen; where the
    speed is not known the memory verdict stands."""
    from hisho.core.hub.fit import LABELS, badge
    from hisho.core.planner.speed import SPEED_FLOOR

    assert badge("fits", SPEED_FLOOR - 0.5) == "slow" and badge("tight", 1.0) == "slow"
    assert badge("fits", SPEED_FLOOR + 5) == "fits" and badge("fits", None) == "fits"
    assert badge("wont_fit", 1.0) == "wont_fit"
    assert LABELS["slow"] == "Slow here"
