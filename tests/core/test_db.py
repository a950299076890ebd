from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.db import Database, DatabaseUnavailable, SchemaTooNew


def steps() -> list:
    return [
        lambda db: db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"),
        lambda db: db.execute("ALTER TABLE notes ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"),
    ]


def test_migrate_in_order_and_idempotent(tmp_path: Path) -> None:
    db = Database(tmp_path / "a.sqlite3")
    assert db.migrate("notes", steps()[:1]) == 1
    db.execute("INSERT INTO notes (id, text) VALUES (1, 'x')")
    assert db.migrate("notes", steps()) == 2
    assert db.query("SELECT id, text, pinned FROM notes") == [{"id": 1, "text": "x", "pinned": 0}]
    assert db.migrate("notes", steps()) == 2


def test_two_connections_upgrading_at_once_run_each_step_once(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stores opening the same database (two objects in one process, or two processes): the second read
    version 0 before the first upgraded; it must find the work done, not run the steps again."""
    path = tmp_path / "a.sqlite3"
    first, second = Database(path), Database(path)
    real_version = Database.version
    raced = []

    def version_then_other_upgrades(self: Database, component: str) -> int:
        found = real_version(self, component)
        if self is second and not raced:
            raced.append(found)
            assert first.migrate("notes", steps()) == 2    # lands between the second's read and its steps
        return found

    monkeypatch.setattr(Database, "version", version_then_other_upgrades)
    assert second.migrate("notes", steps()) == 2
    assert raced == [0]
    assert real_version(second, "notes") == 2
    assert [r["name"] for r in second.query("PRAGMA table_info(notes)")] == ["id", "text", "pinned"]


def test_transaction_rolls_back(tmp_path: Path) -> None:
    db = Database(tmp_path / "a.sqlite3")
    db.migrate("notes", steps())
    with pytest.raises(RuntimeError):
        with db.transaction() as t:
            t.execute("INSERT INTO notes (id, text) VALUES (5, 'gone')")
            raise RuntimeError("boom")
    assert db.query("SELECT * FROM notes") == []


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = Database(tmp_path / "a.sqlite3")
    db.migrate("notes", steps())
    db.close()
    with pytest.raises(SchemaTooNew, match="newer Hisho"):
        Database(tmp_path / "a.sqlite3").migrate("notes", steps()[:1])


def test_corrupt_file_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"garbage" * 1000)
    with pytest.raises(DatabaseUnavailable):
        Database(bad)


def test_read_only_view(tmp_path: Path) -> None:
    db = Database(tmp_path / "a.sqlite3")
    db.migrate("notes", steps())
    db.execute("INSERT INTO notes (id, text) VALUES (1, 'keep')")
    db.close()
    ro = Database(tmp_path / "a.sqlite3", read_only=True)
    assert ro.migrate("notes", steps()) == 2
    assert ro.query("SELECT text FROM notes") == [{"text": "keep"}]
    with pytest.raises(DatabaseUnavailable):
        ro.execute("INSERT INTO notes (id, text) VALUES (2, 'no')")
