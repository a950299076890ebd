"""The byte path of a download and how far a partial file is trusted (hisho.core.hub.receive, .partial).

A partial is trusted to its end within one boot of the machine; after a restart only to its last durable
checkpoint; without a ledger not at all. The body is read from the socket for a plain answer, through httpx
otherwise, and a server that ignores the Range starts the file again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hisho.core.hub import Stopped, pull, repo_files
from hisho.core.hub import download as download_mod
from hisho.core.hub import partial as partial_mod
from hisho.core.hub import receive as receive_mod
from hisho.core.hub.fetch import partial_path
from hisho.core.services import open_downloads, open_models
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub, run_in_thread, write_payload_gguf

__all__ = ["hub"]  # the fixture, imported for pytest
MIB = 1024**2
REPO = "org/Tiny-GGUF"
NAME = "tiny-Q4_K_M.gguf"
SPEC = f"{REPO}:{NAME}"
KEY = f"{REPO}/{NAME}"


def serve(hub: FakeHub, tmp_path: Path, mib: int = 6) -> Path:
    folder = tmp_path / "served"
    folder.mkdir(exist_ok=True)
    path = write_payload_gguf(folder / NAME, mib)
    hub.add_file(REPO, NAME, path)
    return path


def leave_partial(hub: FakeHub, src: Path, data: bytes, ledger: dict[str, object] | None) -> Path:
    """A partial as a run that stopped would leave it, with ``ledger`` beside it (None: no ledger)."""
    dest = download_mod.target_dir(REPO) / NAME
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = partial_path(dest, hub.repos[REPO].files[NAME].sha256)
    part.write_bytes(data)
    if ledger is not None:
        partial_mod.ledger_path(part).write_text(json.dumps(ledger))
    return part


def test_within_one_boot_the_whole_partial_is_kept(hub: FakeHub, tmp_path: Path) -> None:
    src = serve(hub, tmp_path)
    data = src.read_bytes()
    leave_partial(hub, src, data[:len(data) // 2], {"boot": partial_mod.boot_id(), "durable": 0})
    entry = pull(SPEC, open_downloads(open_models()))
    assert Path(entry.path).read_bytes() == data
    assert hub.served[KEY] == len(data) - len(data) // 2  # a kill in this boot: nothing is fetched twice
    assert not list(Path(entry.path).parent.glob(".*"))  # partial and ledger gone


def test_after_a_restart_the_partial_is_cut_to_its_last_durable_length(hub: FakeHub, tmp_path: Path) -> None:
    src = serve(hub, tmp_path)
    data = src.read_bytes()
    quarter = len(data) // 4
    # A crash: the file's length ran ahead of its data, the tail beyond the checkpoint reads as zeros
    crashed = data[:quarter] + bytes(len(data) // 2)
    part = leave_partial(hub, src, crashed, {"boot": "a-boot-before-the-crash", "durable": quarter})
    assert partial_mod.trusted_length(part) == quarter
    entry = pull(SPEC, open_downloads(open_models()))  # trusting the whole partial would end in "arrived damaged"
    assert Path(entry.path).read_bytes() == data
    assert hub.served[KEY] == len(data) - quarter


def test_a_partial_without_a_ledger_is_not_trusted(hub: FakeHub, tmp_path: Path) -> None:
    src = serve(hub, tmp_path)
    data = src.read_bytes()
    part = leave_partial(hub, src, bytes(len(data) // 2), None)
    assert partial_mod.trusted_length(part) == 0
    entry = pull(SPEC, open_downloads(open_models()))
    assert Path(entry.path).read_bytes() == data
    assert hub.served[KEY] == len(data)


def test_checkpoints_record_what_was_made_durable(hub: FakeHub, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    serve(hub, tmp_path, 8)
    monkeypatch.setattr(partial_mod, "CHECKPOINT", MIB)
    hub.throttle = 4 * MIB
    dl = open_downloads(open_models())
    job = dl.enqueue(next(f for f in repo_files(REPO)))
    t, got = run_in_thread(lambda: dl.run(job.id))
    folder = download_mod.target_dir(REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = list(folder.glob(".*.part")) if folder.exists() else []
        if parts and parts[0].stat().st_size >= 3 * MIB:
            break
        time.sleep(0.01)
    dl.pause(job.id)
    t.join(10)
    assert isinstance(got[0], Stopped)
    [part] = folder.glob(".*.part")
    ledger = partial_mod.read_ledger(part)
    assert ledger is not None and ledger[0] == partial_mod.boot_id()
    assert 2 * MIB <= ledger[1] <= part.stat().st_size  # checkpoints every MiB, never beyond the file


def test_body_from_the_socket_and_through_httpx_give_the_same_file(hub: FakeHub, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    src = serve(hub, tmp_path, 9)
    seen: list[bool] = []
    plain = receive_mod._plain_socket
    monkeypatch.setattr(receive_mod, "_plain_socket", lambda r: seen.append(plain(r) is not None) or plain(r))
    entry = pull(SPEC, open_downloads(open_models()))
    assert Path(entry.path).read_bytes() == src.read_bytes()
    assert seen == [True]  # a plain HTTP/1.1 answer with a length: read from the socket
    from hisho.core.models.store import ModelStore

    ModelStore().remove(entry.name)
    monkeypatch.setattr(receive_mod, "RAW", False)
    entry = pull(SPEC, open_downloads(open_models()))
    assert Path(entry.path).read_bytes() == src.read_bytes()
    assert seen == [True]  # not asked: httpx read the body


def test_a_server_that_ignores_the_range_starts_the_file_again(hub: FakeHub, tmp_path: Path) -> None:
    src = serve(hub, tmp_path)
    data = src.read_bytes()
    leave_partial(hub, src, data[:len(data) // 3], {"boot": partial_mod.boot_id(), "durable": 0})
    hub.ignore_range.add(KEY)
    entry = pull(SPEC, open_downloads(open_models()))
    assert Path(entry.path).read_bytes() == data
    assert hub.served[KEY] == len(data)
