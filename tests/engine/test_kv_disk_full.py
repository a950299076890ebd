"""A KV save on a full disk (issue 16, point 8): whatever fails, no chunk file is left without its index row and
no index row without its file, and the next save works once space returns. Real engine, real chunk writer, a
real small tmpfs that fills up: first under the chunk files, then under the index database."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.kv import format as kvf
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from tests.engine.test_kv_state import CHUNK, answer, expected, kv_engine, prompts, save_conversation
from tests.faults import drain, fill, small_fs

__all__ = ["kv_engine", "prompts"]  # module fixtures shared with test_kv_state

FS_BYTES = 16 << 20


def chunk_files(kv_dir: Path) -> list[Path]:
    return sorted(p for p in kv_dir.rglob("*") if p.is_file())


def rows(index: KVIndex) -> tuple[int, int]:
    chunks = index.db.query_one("SELECT count(*) FROM kv_chunks")
    entries = index.db.query_one("SELECT count(*) FROM kv_entries")
    assert chunks is not None and entries is not None
    return int(chunks[0]), int(entries[0])


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_fs(tmp_path / "fs", FS_BYTES) as mounted:
        yield mounted


def open_session(engine: EngineClient, db_path: Path, kv_dir: Path) -> KVSession:
    return KVSession(engine, KVIndex(Database(db_path), kv_dir), chunk_tokens=CHUNK, budget_bytes=1 << 40)


def chunk_sizes(engine: EngineClient, conv: list[int], tmp_path: Path) -> list[int]:
    """The sizes of the conversation's chunk files, in order (a save elsewhere, then thrown away)."""
    session = open_session(engine, tmp_path / "sizes.sqlite3", tmp_path / "sizes")
    save_conversation(engine, session, conv)
    sizes = [session.kv_dir / r["path"] for r in session.index.db.query("SELECT path FROM kv_chunks ORDER BY start")]
    out = [p.stat().st_size for p in sizes]
    session.close()
    shutil.rmtree(tmp_path / "sizes")
    return out


def test_a_save_on_a_full_disk_leaves_no_orphan_chunk_and_the_next_one_works(
        kv_engine: EngineClient, prompts: dict[str, list[int]], tmp_path: Path, fs: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    conv = prompts["conv"]
    sizes = chunk_sizes(kv_engine, conv, tmp_path)
    assert len(sizes) >= 3 and sizes[-1] + (256 << 10) < sizes[0]  # the last chunk is the short one
    session = open_session(kv_engine, tmp_path / "db.sqlite3", fs / "kv")
    try:
        # Room for the short last chunk, not for a full one: every full chunk hits ENOSPC, the last one fits.
        fill(fs, leave=sizes[-1] + (128 << 10))
        with caplog.at_level(logging.WARNING, logger="hisho.kv"):
            save_conversation(kv_engine, session, conv)
        assert chunk_files(session.kv_dir) == []  # nothing orphaned, no temp file
        # The writer stops at the first failed chunk: the short last one is not written only to be removed.
        assert not [r for r in caplog.records if "the index did not take" in r.getMessage()]
        assert rows(session.index) == (0, 0) and session.usage("conv:1").n_tokens == 0
        drain(fs)  # space returns: the next save is whole
        save_conversation(kv_engine, session, conv)
        assert rows(session.index) == (len(sizes), 1) and len(chunk_files(session.kv_dir)) == len(sizes)
        kv_engine.call("seq_rm", {"seq": 0, "start": 0})
        report = session.restore("conv:1", prompts["full"])
        assert report.restored == len(conv) and report.failed == 0
        assert answer(kv_engine, prompts["full"])[0] == expected(kv_engine, prompts, len(conv))
    finally:
        session.close()


def test_an_index_on_a_full_disk_leaves_no_chunk_behind(kv_engine: EngineClient, prompts: dict[str, list[int]],
                                                          tmp_path: Path, fs: Path) -> None:
    conv = prompts["conv"]
    session = open_session(kv_engine, fs / "db.sqlite3", tmp_path / "kv")  # the chunk files have room
    try:
        fill(fs)  # the index cannot record them
        save_conversation(kv_engine, session, conv)
        assert chunk_files(session.kv_dir) == []
        drain(fs)
        assert rows(session.index) == (0, 0)
        save_conversation(kv_engine, session, conv)
        files = chunk_files(session.kv_dir)
        assert rows(session.index) == (len(files), 1) and files and not [p for p in files if kvf.is_temp(p)]
        assert session.usage("conv:1").n_tokens == len(conv)
    finally:
        session.close()
