"""The KV index: which chunk files exist, which token prefixes they hold, who owns them, what they cost.

SQLite component ``kv`` on ``hisho.core.db.Database``:
- ``kv_chunks``: one row per chunk file (content-addressed by its chained key; see ``format``), with its
  tokens (int32 blob) so a prompt can be matched against it without opening the file.
- ``kv_entries``: an owner (``conv:<id>``, ``doc:<id>``) and the tip chunk of its saved prefix, per
  fingerprint. A chunk is kept while some entry's chain reaches it; ``gc`` deletes the rest.
- ``kv_speed``: measured prefill and restore speeds per fingerprint, for "seconds saved" estimates.
- ``kv_models``: the model file (path, size, xxh3-128 of every byte) each fingerprint was saved from, so that
  deleting a model can say which snapshots go with it (``hisho.core.models.removal``).

What the saved KV costs and saves, and the eviction order, are read by ``hisho.core.kv.usage``.

Rules of use: any thread may call (the Database serialises). Files are a cache: every method tolerates
missing files and rows, and ``reconcile`` repairs both directions. Deleting is logged, never raised.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from hisho.core import paths
from hisho.core.db import Database
from hisho.core.kv import format as kvf
from hisho.core.kv.usage import Usage, chain, plan_eviction, read_usage

log = logging.getLogger("hisho.kv")

COMPONENT = "kv"
RECENT_S = 120.0  # files younger than this may belong to a save in flight: reconcile leaves them alone


def _v1(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE kv_chunks (
        key TEXT PRIMARY KEY, parent TEXT NOT NULL, fingerprint TEXT NOT NULL, start INTEGER NOT NULL,
        n_tokens INTEGER NOT NULL, tokens BLOB NOT NULL, path TEXT NOT NULL, bytes INTEGER NOT NULL,
        created REAL NOT NULL, last_used REAL NOT NULL)""")
    db.execute("CREATE INDEX kv_chunks_parent ON kv_chunks(parent)")
    db.execute("""CREATE TABLE kv_entries (
        owner TEXT NOT NULL, fingerprint TEXT NOT NULL, tip TEXT NOT NULL, n_tokens INTEGER NOT NULL,
        pinned INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL, last_used REAL NOT NULL,
        PRIMARY KEY (owner, fingerprint))""")
    db.execute("""CREATE TABLE kv_speed (
        fingerprint TEXT PRIMARY KEY, prefill_tok_s REAL, restore_bytes_s REAL, updated REAL NOT NULL)""")


def _v2(db: sqlite3.Connection) -> None:
    # Which model file each fingerprint was computed from (its path and whole-file identity), so that deleting
    # a model can name and delete its snapshots. Recorded by every save from v2 on; a fingerprint saved
    # earlier has no row until it is saved again (the chunk files hold only the fingerprint).
    db.execute("""CREATE TABLE kv_models (
        fingerprint TEXT PRIMARY KEY, xxh3_128 TEXT NOT NULL, size INTEGER NOT NULL, path TEXT NOT NULL,
        updated REAL NOT NULL)""")
    db.execute("CREATE INDEX kv_models_identity ON kv_models(xxh3_128, size)")


STEPS = [_v1, _v2]


def _unpack(blob: bytes) -> array[int]:
    arr = array("i")
    arr.frombytes(blob)
    return arr


@dataclass
class Match:
    """The longest saved prefix of a prompt: chunks to load in order, then keep the first ``keep`` tokens."""

    chunks: list[dict[str, Any]]
    keep: int

    def request(self) -> list[dict[str, Any]]:
        return [{"key": c["key"], "path": c["path"], "start": c["start"], "n_tokens": c["n_tokens"]}
                for c in self.chunks]


class KVIndex:
    """Chunk and owner bookkeeping on a Database; files live under ``kv_dir``."""

    def __init__(self, db: Database | None = None, kv_dir: Path | None = None) -> None:
        self.db = db or Database()
        self.kv_dir = kv_dir or paths.kv_dir()
        self.db.migrate(COMPONENT, STEPS)

    # ----- recording -------------------------------------------------------------------------------

    def record_save(self, owner: str, fp: str, chunks: Sequence[dict[str, Any]],
                    model: Mapping[str, Any] | None = None) -> int:
        """Record the chunks a save reported (``state_save``'s "done") and point ``owner`` at the last good one.
        ``model`` (the report's ``{"path", "size", "xxh3_128"}``) is the file the fingerprint belongs to.
        Returns the number of tokens the owner now has saved."""
        now = time.time()
        tip, n_tokens = "", 0
        with self.db.transaction():
            if model and model.get("xxh3_128"):
                self.db.execute("INSERT OR REPLACE INTO kv_models VALUES (?,?,?,?,?)",
                                [fp, str(model["xxh3_128"]), int(model.get("size", 0)), str(model.get("path", "")),
                                 now])
            for c in chunks:
                if c.get("error") or "bytes" not in c:
                    break  # a chain with a hole is only usable up to the hole
                self.db.execute(
                    """INSERT INTO kv_chunks (key, parent, fingerprint, start, n_tokens, tokens, path, bytes,
                       created, last_used) VALUES (?,?,?,?,?,?,?,?,?,?)
                       ON CONFLICT(key) DO UPDATE SET last_used = excluded.last_used, bytes = excluded.bytes""",
                    [c["key"], c["parent"], fp, c["start"], c["n_tokens"], kvf.tokens_bytes(c["tokens"]),
                     self._rel(c["path"]), int(c["bytes"]), now, now])
                tip, n_tokens = c["key"], c["start"] + c["n_tokens"]
            if tip:
                self.db.execute(
                    """INSERT INTO kv_entries (owner, fingerprint, tip, n_tokens, updated, last_used)
                       VALUES (?,?,?,?,?,?) ON CONFLICT(owner, fingerprint) DO UPDATE SET tip = excluded.tip,
                       n_tokens = excluded.n_tokens, updated = excluded.updated, last_used = excluded.last_used""",
                    [owner, fp, tip, n_tokens, now, now])
        return n_tokens

    def set_pinned(self, owner: str, pinned: bool) -> None:
        self.db.execute("UPDATE kv_entries SET pinned = ? WHERE owner = ?", [int(pinned), owner])

    def touch(self, owner: str, keys: Sequence[str] = ()) -> None:
        now = time.time()
        self.db.execute("UPDATE kv_entries SET last_used = ? WHERE owner = ?", [now, owner])
        for key in keys:
            self.db.execute("UPDATE kv_chunks SET last_used = ? WHERE key = ?", [now, key])

    # ----- lookup ----------------------------------------------------------------------------------

    def lookup(self, fp: str, tokens: Sequence[int]) -> Match:
        """The longest saved prefix of ``tokens`` under fingerprint ``fp``. Walks the chain from the root:
        a chunk whose tokens all match continues the walk; otherwise the chunk sharing the longest partial
        prefix ends it (it is loaded and trimmed)."""
        parent, pos, chosen = kvf.root_key(fp), 0, []
        want = array("i", tokens)
        while pos < len(want):
            best, best_common, best_full = None, 0, False
            for row in self.db.query("SELECT * FROM kv_chunks WHERE parent = ? AND fingerprint = ? AND start = ?",
                                     [parent, fp, pos]):
                have = _unpack(row["tokens"])
                common = _common(have, want, pos)
                full = common == len(have)
                if (full, common) > (best_full, best_common):
                    best, best_common, best_full = row, common, full
            if best is None or best_common == 0:
                break
            chosen.append({**best, "path": str(self.kv_dir / best["path"]), "tokens": None})
            pos += best_common
            if not best_full:
                break
            parent = best["key"]
        # A KV cell holds no logits: the caller re-evaluates the last kept token, so never keep all of them.
        return Match(chosen, min(pos, len(want) - 1) if chosen else 0)

    # ----- removal, budget, repair -----------------------------------------------------------------

    def remove_chunk(self, key: str, reason: str) -> None:
        """Forget a bad chunk and delete its file (a restore found it damaged or foreign)."""
        row = self.db.query("SELECT path FROM kv_chunks WHERE key = ?", [key])
        self._forget([key])
        if row:
            self._unlink(self.kv_dir / row[0]["path"], reason)
        self.gc()  # chunks after the bad one can no longer be reached

    def delete_owner(self, owner: str) -> int:
        """Deleting a conversation or document deletes its KV. Returns bytes freed."""
        self.db.execute("DELETE FROM kv_entries WHERE owner = ?", [owner])
        return self.gc()

    def model_fingerprints(self, identity: Mapping[str, Any] | None, path: str) -> list[str]:
        """The fingerprints saved from a model file with this ``identity`` (``{"size", "xxh3_128"}``, any path,
        any KV type) or from this ``path`` (whatever the file held then)."""
        ident = identity or {}
        rows = self.db.query("SELECT fingerprint FROM kv_models WHERE (xxh3_128 = ? AND size = ?) OR path = ? "
                             "ORDER BY fingerprint", [str(ident.get("xxh3_128", "")), int(ident.get("size", -1)),
                                                      path])
        return [str(r["fingerprint"]) for r in rows]

    def model_sizes(self) -> set[int]:
        """The sizes of the model files any snapshot was saved from: a file of another size has none, and
        its identity need not be computed to know it."""
        return {int(r["size"]) for r in self.db.query("SELECT DISTINCT size FROM kv_models")}

    def snapshots(self, fps: Sequence[str]) -> tuple[int, int]:
        """(saved prefixes, bytes of chunk files) under these fingerprints. Chunk keys chain from the
        fingerprint's root, so a chunk belongs to exactly one fingerprint and the bytes are what deleting
        them frees."""
        if not fps:
            return 0, 0
        marks = ",".join("?" * len(fps))
        n = self.db.query_one(f"SELECT COUNT(*) FROM kv_entries WHERE fingerprint IN ({marks})", list(fps))
        size = self.db.query_one(f"SELECT COALESCE(SUM(bytes), 0) FROM kv_chunks WHERE fingerprint IN ({marks})",
                                 list(fps))
        return (int(n[0]) if n else 0), (int(size[0]) if size else 0)

    def delete_fingerprints(self, fps: Sequence[str]) -> int:
        """Forget every saved prefix under these fingerprints (their model was deleted) and delete the files.
        Returns bytes freed."""
        if not fps:
            return 0
        marks = ",".join("?" * len(fps))
        with self.db.transaction():
            for table in ("kv_entries", "kv_speed", "kv_models"):
                self.db.execute(f"DELETE FROM {table} WHERE fingerprint IN ({marks})", list(fps))
        return self.gc()

    def gc(self) -> int:
        """Delete chunks no entry's chain reaches. Returns bytes freed."""
        rows = self.db.query("SELECT key, parent, path, bytes FROM kv_chunks")
        parents = {r["key"]: r["parent"] for r in rows}
        live: set[str] = set()
        for e in self.db.query("SELECT tip FROM kv_entries"):
            key = e["tip"]
            while key in parents and key not in live:
                live.add(key)
                key = parents[key]
        freed = 0
        for r in rows:
            if r["key"] not in live:
                self.db.execute("DELETE FROM kv_chunks WHERE key = ?", [r["key"]])
                self._unlink(self.kv_dir / r["path"], "no longer referenced")
                freed += int(r["bytes"])
        return freed

    def total_bytes(self) -> int:
        row = self.db.query_one("SELECT COALESCE(SUM(bytes), 0) FROM kv_chunks")
        return int(row[0]) if row else 0

    def evict(self, budget_bytes: int) -> list[str]:
        """Drop saved prefixes until the files fit ``budget_bytes``; returns the owners dropped, in order.

        Order (docs/kv-format.md): least recently used first among unprotected owners that hold at least one
        chunk no protected owner needs (a chunk shared with a pinned chat or a document counts as protected:
        dropping such an owner would free nothing); only when those are gone, protected owners (pinned
        conversations and documents), least recently used first."""
        self.gc()
        victims = plan_eviction(self.db, budget_bytes)
        if not victims:
            return []
        with self.db.transaction():
            for owner, fp in victims:
                self.db.execute("DELETE FROM kv_entries WHERE owner = ? AND fingerprint = ?", [owner, fp])
        freed = self.gc()
        dropped = list(dict.fromkeys(owner for owner, _fp in victims))
        log.info("KV budget %d bytes: evicted %s (%d bytes freed)", budget_bytes, ", ".join(dropped), freed)
        return dropped

    def clear(self) -> int:
        """Forget every saved prefix and delete every file under ``kv_dir`` (the user's "Clear all"). Measured
        speeds are kept. Conversation text lives elsewhere and is not touched. Returns bytes deleted."""
        with self.db.transaction():
            self.db.execute("DELETE FROM kv_entries")
            self.db.execute("DELETE FROM kv_chunks")
        freed = 0
        for path in sorted(self.kv_dir.glob("*/*")):
            if path.is_file():
                size = path.stat().st_size
                self._unlink(path, "clear all")
                freed += size
        for folder in self.kv_dir.glob("*"):
            if folder.is_dir():
                try:
                    folder.rmdir()
                except OSError:
                    pass  # a save in flight put a file there since
        return freed

    def reconcile(self, *, alone: bool = False) -> dict[str, int]:
        """Repair after a crash or a user's hand: rows without files, files without rows, stale temp files.

        ``alone``: the caller holds the data folder's instance lock (hisho.core.instance) and has not saved yet,
        so no save can be in flight and an unindexed chunk left by a killed client goes now, not two minutes
        later (issue 16)."""
        missing = [r["key"] for r in self.db.query("SELECT key, path FROM kv_chunks")
                   if not (self.kv_dir / r["path"]).exists()]
        for key in missing:
            log.warning("KV index row %s has no file; forgetting it", key)
        self._forget(missing)
        gone = len(missing)
        known = {r["path"] for r in self.db.query("SELECT path FROM kv_chunks")}
        strays = 0
        cutoff = float("inf") if alone else time.time() - RECENT_S
        for path in self.kv_dir.glob("*/*"):
            rel = path.relative_to(self.kv_dir).as_posix()
            if rel in known or not path.is_file():
                continue
            if kvf.is_temp(path) and _writer_alive(path):
                continue
            if not kvf.is_temp(path) and path.stat().st_mtime > cutoff:
                continue
            self._unlink(path, "temp file of an interrupted save" if kvf.is_temp(path) else "not in the index")
            strays += 1
        return {"rows_without_file": gone, "files_removed": strays, "freed": self.gc()}

    def _forget(self, keys: Sequence[str]) -> None:
        """Drop chunk rows; an owner whose chain passes through one keeps the part before the hole."""
        if not keys:
            return
        gone = set(keys)
        rows = {r["key"]: r for r in self.db.query("SELECT key, parent, start FROM kv_chunks")}
        with self.db.transaction():
            for e in self.db.query("SELECT owner, fingerprint, tip FROM kv_entries"):
                hit = [k for k in chain(rows, e["tip"]) if k in gone]
                if not hit:
                    continue
                first = rows[hit[-1]]  # the chain runs tip -> root: the last hit is nearest the root
                if first["parent"] in rows and first["parent"] not in gone:
                    self.db.execute("UPDATE kv_entries SET tip = ?, n_tokens = ? WHERE owner = ? AND fingerprint = ?",
                                    [first["parent"], first["start"], e["owner"], e["fingerprint"]])
                else:
                    self.db.execute("DELETE FROM kv_entries WHERE owner = ? AND fingerprint = ?",
                                    [e["owner"], e["fingerprint"]])
            for key in gone:
                self.db.execute("DELETE FROM kv_chunks WHERE key = ?", [key])

    # ----- what it costs and saves -------------------------------------------------------------------

    def record_speed(self, fp: str, *, prefill_tok_s: float | None = None,
                     restore_bytes_s: float | None = None) -> None:
        """Blend a new measurement into the stored speed (exponential average, new weight 0.3)."""
        row = self.db.query("SELECT * FROM kv_speed WHERE fingerprint = ?", [fp])
        old: dict[str, Any] = dict(row[0]) if row else {}

        def blend(name: str, new: float | None) -> float | None:
            prev = old.get(name)
            if new is None or new <= 0:
                return prev if isinstance(prev, float) else None
            return new if prev is None else 0.7 * float(prev) + 0.3 * new

        self.db.execute("INSERT OR REPLACE INTO kv_speed VALUES (?,?,?,?)",
                        [fp, blend("prefill_tok_s", prefill_tok_s), blend("restore_bytes_s", restore_bytes_s),
                         time.time()])

    def usage(self, owner: str) -> Usage:
        return self.usage_all(owner).get(owner, Usage(owner, 0, 0, 0, 0.0))

    def usage_all(self, owner: str | None = None) -> dict[str, Usage]:
        """Every owner's usage in one SQL query, or just ``owner``'s (``hisho.core.kv.usage.read_usage``)."""
        return read_usage(self.db, owner)

    # ----- helpers -----------------------------------------------------------------------------------

    def _rel(self, path: str) -> str:
        p = Path(path)
        try:
            return p.relative_to(self.kv_dir).as_posix()
        except ValueError:
            return p.as_posix()

    def _unlink(self, path: Path, reason: str) -> None:
        try:
            path.unlink()
            log.info("deleted KV file %s (%s)", path.name, reason)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete KV file %s: %s", path, exc)


def _common(have: array[int], want: array[int], pos: int) -> int:
    n = min(len(have), len(want) - pos)
    if have[:n] == want[pos:pos + n]:
        return n
    i = 0
    while i < n and have[i] == want[pos + i]:
        i += 1
    return i


def _writer_alive(path: Path) -> bool:
    try:
        pid = int(path.name.rsplit(kvf.TMP_MARK, 1)[1])
    except (IndexError, ValueError):
        return False
    return bool(psutil.pid_exists(pid))
