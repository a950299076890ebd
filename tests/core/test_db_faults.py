"""A full disk is a clear, classified error that hides nothing (issue 16, point 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database, DatabaseUnavailable, DiskFull
from tests.faults import drain, fill, small_fs


def test_sqlite_full_inside_a_transaction_is_the_error_the_caller_sees(tmp_path: Path) -> None:
    """SQLite rolls back by itself on SQLITE_FULL; a second ROLLBACK used to raise "cannot rollback"."""
    db = Database(tmp_path / "a.sqlite3")
    db.execute("CREATE TABLE t (x TEXT)")
    pages = db.query_one("PRAGMA page_count")
    assert pages is not None
    db.execute(f"PRAGMA max_page_count = {pages[0]}")
    with pytest.raises(DatabaseUnavailable, match="full"):
        with db.transaction():
            db.execute("INSERT INTO t VALUES (?)", ["x" * 200_000])
    db.execute("PRAGMA max_page_count = 1000000")
    with db.transaction():  # the connection is usable afterwards
        db.execute("INSERT INTO t VALUES ('ok')")
    assert db.query("SELECT x FROM t") == [{"x": "ok"}]


def test_a_full_disk_says_how_much_to_free(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", 8 << 20) as fs:
        store = ConversationStore(Database(fs / "hisho.sqlite3"))
        conv = store.create("kept")
        fill(fs)
        with pytest.raises(DiskFull) as err:
            with store.tx():
                store.add_message(conv.id, "user", "x" * 300_000)
        assert str(err.value).startswith("disk full: ") and " needed on " in str(err.value)
        assert "retry" in str(err.value)
        drain(fs)
        store.add_message(conv.id, "user", "after")  # space is back: writes work again
        assert [m.content for m in store.messages(conv.id)] == ["after"]
        store.close()


def test_a_full_disk_at_launch_opens_read_only(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", 8 << 20) as fs:
        path = fs / "hisho.sqlite3"
        store = ConversationStore(Database(path))
        store.add_message(store.create("kept").id, "user", "hello")
        store.close()
        fill(fs)
        with pytest.raises(DiskFull, match="disk full: .* needed on "):
            ConversationStore(Database(path))
        ro = ConversationStore(Database(path, read_only=True))
        assert [c.title for c in ro.conversations()] == ["kept"]
        ro.close()


def test_logging_on_a_full_disk_prints_one_line_not_tracebacks(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from hisho.core import logs

    with small_fs(tmp_path / "fs", 4 << 20) as fs:
        monkeypatch.setenv("HISHO_HOME", str(fs))
        logs.setup()
        log = logging.getLogger("hisho.store")
        log.info("before the disk fills")
        fill(fs)
        for i in range(50):
            log.warning("record %d %s", i, "x" * 2000)
        err = capsys.readouterr().err
        assert "--- Logging error ---" not in err and "Traceback" not in err
        assert err.count("cannot be written") == 1
        drain(fs)
        for handler in logging.getLogger("hisho").handlers:
            handler.close()
            logging.getLogger("hisho").removeHandler(handler)
        logs._configured.clear()
