"""The one SQLite wrapper (qutebrowser's misc/sql.py is the model), on the standard library's sqlite3, with
sqlite-utils for the schema work and upserts (docs/architecture.md, "SQLite", says which is which).

- One connection per ``Database``, used under a lock: SQLite writes go through one owner. Any thread may call in.
- WAL journal, foreign keys on, busy timeout.
- Each feature owns a named *component* with its own schema version and ordered upgrade steps
  (``Database.migrate``); versions live in the ``hisho_schema`` table. A database whose component version is newer
  than this app knows is refused with ``SchemaTooNew`` (we would corrupt what we do not understand).
- A step gets a ``sqlite_utils.Database`` on the same connection, inside the step's transaction: ``create``,
  ``create_index``, ``enable_fts(create_triggers=True)``, ``add_column``, ``transform``, or plain ``execute``.
  Foreign keys are off while a step runs (SQLite's own recipe for changing a table: ``transform`` drops and
  renames, which would otherwise cascade deletes into the rows that point at it) and checked before it commits.
- ``upsert(table, row, pk)`` inserts or updates one row by its key (sqlite-utils' ``INSERT … ON CONFLICT DO
  UPDATE`` of the columns given): unlike ``INSERT OR REPLACE`` it never deletes the old row first, so no
  ``ON DELETE`` action fires and columns not given keep their values.
- ``transaction()`` commits or rolls back as a whole.
- Errors are split: ``DatabaseUnavailable`` (disk full, locked, corrupt, read-only, too new: tell the user) versus
  everything else (a bug: let it propagate). A full disk is ``DiskFull``, whose message says how much space to
  free. SQLite rolls a transaction back itself on SQLITE_FULL; our own ROLLBACK then runs only if a transaction is
  still open, so the real error is what the caller sees.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hisho.core import paths
from hisho.core.errors import UserError
from hisho.core.units import format_bytes

if TYPE_CHECKING:
    import sqlite_utils

log = logging.getLogger("hisho.store")

Step = Callable[["sqlite_utils.Database"], None]  # one schema upgrade, run inside a transaction

_USER_ERRORS = ("database or disk is full", "database is locked", "file is not a database",
                "database disk image is malformed", "attempt to write a readonly database", "unable to open",
                "disk i/o error")
_FULL_ERRORS = ("database or disk is full", "disk i/o error")  # a full disk while setting up WAL: "disk I/O error"
HEADROOM_BYTES = 16 << 20  # free space a write needs: the WAL grows by whole pages, a checkpoint copies them back


class DatabaseUnavailable(UserError):
    """The database cannot be used as asked (disk full, locked, corrupt, read-only). Tell the user."""


class SchemaTooNew(DatabaseUnavailable):
    """The file was written by a newer Hisho."""


class DiskFull(DatabaseUnavailable):
    """No space left where the database lives. ``needed_bytes``: how much to free before retrying."""

    def __init__(self, folder: Path, free_bytes: int, needed_bytes: int) -> None:
        self.folder, self.free_bytes, self.needed_bytes = folder, free_bytes, needed_bytes
        super().__init__(f"disk full: {format_bytes(needed_bytes)} needed on {folder} "
                         f"({format_bytes(free_bytes)} free); free space and retry")


def disk_full(path: str | os.PathLike[str] | None) -> DiskFull | None:
    """A ``DiskFull`` if the folder of ``path`` has less than ``HEADROOM_BYTES`` (plus the WAL, which a checkpoint
    copies back) free, else None."""
    if path is None or str(path) == ":memory:":
        return None
    folder = Path(path).parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    try:
        wal = Path(f"{path}-wal").stat().st_size
    except OSError:
        wal = 0
    need = HEADROOM_BYTES + wal
    return DiskFull(folder, free, need - free) if free < need else None


def classify(exc: sqlite3.Error, path: str | os.PathLike[str] | None = None) -> Exception:
    """Return a DatabaseUnavailable for conditions the user can act on, else the original error. With ``path``,
    a full disk (SQLITE_FULL, or an I/O error while the disk is full) becomes ``DiskFull``."""
    text = str(exc).lower()
    if not isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError) or \
            not any(m in text for m in _USER_ERRORS):
        return exc
    if any(m in text for m in _FULL_ERRORS):
        full = disk_full(path)
        if full is not None:
            return full
    return DatabaseUnavailable(f"the database cannot be used: {exc}")


class Database:
    """A SQLite file (or ``:memory:``) with migrations, a lock and classified errors."""

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False) -> None:
        self.path = str(path if path is not None else paths.database_path())
        self.read_only = read_only
        self._lock = threading.RLock()
        try:
            try:
                conn = self._connect(read_only)
            except sqlite3.OperationalError as exc:
                if not read_only or self.path == ":memory:" or disk_full(self.path) is None:
                    raise
                # A read-only reader of a WAL database still creates the -shm index, which a full disk refuses:
                # read the main file as it is instead (what the WAL holds is not shown; the log says so).
                log.warning("read-only open failed on a full disk (%s); reading the file without its WAL", exc)
                conn = self._connect(read_only, immutable=True)
        except sqlite3.Error as exc:
            raise classify(exc, self.path) from exc
        self.conn = conn
        self._utils: sqlite_utils.Database | None = None
        if not read_only:
            self.execute("CREATE TABLE IF NOT EXISTS hisho_schema (component TEXT PRIMARY KEY, version INTEGER)")

    def _connect(self, read_only: bool, immutable: bool = False) -> sqlite3.Connection:
        if read_only and self.path != ":memory:":
            flags = "mode=ro&immutable=1" if immutable else "mode=ro"
            conn = sqlite3.connect(f"file:{self.path}?{flags}", uri=True, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA foreign_keys = ON")
            if not read_only and self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fails fast on a corrupt file
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    @property
    def utils(self) -> sqlite_utils.Database:
        """sqlite-utils on the same connection, for the schema steps and upserts: no plugins, and the
        connection's pragmas stay ours (it would turn recursive triggers on). Imported when first used: it
        brings click, pluggy and numpy, hundreds of milliseconds of imports that opening an up-to-date
        database does not need."""
        if self._utils is None:
            import sqlite_utils

            self._utils = sqlite_utils.Database(self.conn, recursive_triggers=False, execute_plugins=False)
        return self._utils

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # ----- schema ---------------------------------------------------------------------------------------

    def version(self, component: str) -> int:
        try:
            row = self.query_one("SELECT version FROM hisho_schema WHERE component = ?", [component])
        except sqlite3.OperationalError:
            return 0
        return int(row[0]) if row else 0

    def migrate(self, component: str, steps: Sequence[Step]) -> int:
        """Bring ``component`` to ``len(steps)``: step i upgrades version i to i+1, each in one transaction.
        Safe when two threads open the same component at once: the version is read and the steps run under the
        connection's lock (the second caller finds the work done)."""
        with self._lock:
            return self._migrate(component, steps)

    def _migrate(self, component: str, steps: Sequence[Step]) -> int:
        current = self.version(component)
        if current > len(steps):
            raise SchemaTooNew(
                f"the {component} data was written by a newer Hisho (schema {current}, this app knows "
                f"{len(steps)}); update Hisho to open it"
            )
        if self.read_only:
            if current < len(steps):
                raise DatabaseUnavailable(f"the {component} data needs an upgrade but the database is read-only")
            return current
        while current < len(steps):
            self.conn.execute("PRAGMA foreign_keys = OFF")     # a no-op inside a transaction: set it before
            try:
                with self.transaction():
                    # Read again under the write lock: another connection (another process, or another store
                    # object in this one) may have run this step since the read above.
                    version = self.version(component)
                    if version >= len(steps):
                        current = version
                        continue
                    # Only what the step broke fails it: a dangling row from before must not block upgrades.
                    before = set(self.conn.execute("PRAGMA foreign_key_check").fetchall())
                    steps[version](self.utils)
                    broken = set(self.conn.execute("PRAGMA foreign_key_check").fetchall()) - before
                    if broken:
                        raise sqlite3.IntegrityError(
                            f"schema step {component} {version + 1} left {len(broken)} rows whose foreign key "
                            f"points nowhere (in table {min(broken)[0]})")
                    self.execute("INSERT OR REPLACE INTO hisho_schema (component, version) VALUES (?, ?)",
                                 [component, version + 1])
                    current = version + 1
            finally:
                self.conn.execute("PRAGMA foreign_keys = ON")
            log.info("schema %s upgraded to %d", component, current)
        return len(steps)

    # ----- access ---------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise classify(exc, self.path) from exc
            try:
                yield self.conn
            except BaseException:
                self._rollback()
                raise
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise classify(exc, self.path) from exc

    def _rollback(self) -> None:
        """Roll back what is still open. SQLite has already rolled back after SQLITE_FULL (and some I/O errors):
        a ROLLBACK then fails with "no transaction is active" and would hide the error that matters."""
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("rollback failed: %s", exc)

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self.conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise classify(exc, self.path) from exc

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                cur = self.conn.execute(sql, params)
                cols = [d[0] for d in cur.description or ()]
                return [dict(zip(cols, row)) for row in cur.fetchall()]
            except sqlite3.Error as exc:
                raise classify(exc, self.path) from exc

    def upsert(self, table: str, row: dict[str, Any], pk: str | tuple[str, ...]) -> None:
        """Insert ``row``, or update the columns it names in the row with the same ``pk``."""
        with self._lock:
            try:
                self.utils.table(table).upsert(row, pk=pk)
            except sqlite3.Error as exc:
                raise classify(exc, self.path) from exc

    def query_one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> tuple[Any, ...] | None:
        with self._lock:
            try:
                row = self.conn.execute(sql, params).fetchone()
                return tuple(row) if row is not None else None
            except sqlite3.Error as exc:
                raise classify(exc, self.path) from exc
