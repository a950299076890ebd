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
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from hisho.core import paths
from hisho.core.db import Database
from hisho.core.kv import format as kvf
from hisho.core.kv.usage import Usage, chain, plan_eviction, read_usage

if TYPE_CHECKING:
    import sqlite_utils  # a step's argument; hisho.core.db imports it only when a step or upsert runs

log = logging.getLogger("hisho.kv")

COMPONENT = "kv"
RECENT_S = 120.0  # files younger than this may belong to a save in flight: reconcile leaves them alone


def _v1(db: sqlite_utils.Database) -> None:
    db.table("kv_chunks").create(
        {"key": str, "parent": str, "fingerprint": str, "start": int, "n_tokens": int, "tokens": bytes,
         "path": str, "bytes": int, "created": float, "last_used": float}, pk="key",
        not_null={"parent", "fingerprint", "start", "n_tokens", "tokens", "path", "bytes", "created", "last_used"})
    db.table("kv_chunks").create_index(["parent"], index_name="kv_chunks_parent")
    db.table("kv_entries").create(
        {"owner": str, "fingerprint": str, "tip": str, "n_tokens": int, "pinned": int, "updated": float,
         "last_used": float}, pk=("owner", "fingerprint"),
        not_null={"owner", "fingerprint", "tip", "n_tokens", "pinned", "updated", "last_used"}, defaults={"pinned": 0})
    db.table("kv_speed").create({"fingerprint": str, "prefill_tok_s": float, "restore_bytes_s": float, "updated": float},
                          pk="fingerprint", not_null={"updated"})


def _v2(db: sqlite_utils.Database) -> None:
    # Which model file each fingerprint was computed from (its path and whole-file identity), so that deleting
    # a model can name and delete its snapshots. Recorded by every save from v2 on; a fingerprint saved
    # earlier has no row until it is saved again (the chunk files hold only the fingerprint).
    db.table("kv_models").create({"fingerprint": str, "xxh3_128": str, "size": int, "path": str, "updated": float},
                           pk="fingerprint", not_null={"xxh3_128", "size", "path", "updated"})
    db.table("kv_models").create_index(["xxh3_128", "size"], index_name="kv_models_identity")


def _v3(db: sqlite_utils.Database) -> None:
    # What a restore ending at a chunk can continue from exactly (kvf.ChunkHeader): NULL for dense models and
    # for rows saved before (dense then: sliding-window and recurrent models got a new fingerprint with them).
    for column in ("swa_lo", "state_end", "n_swa"):
        db.table("kv_chunks").add_column(column, int)


STEPS = [_v1, _v2, _v3]


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
                self.db.upsert("kv_models", {"fingerprint": fp, "xxh3_128": str(model["xxh3_128"]),
                                             "size": int(model.get("size", 0)), "path": str(model.get("path", "")),
                                             "updated": now}, pk="fingerprint")
            for c in chunks:
                if c.get("error") or "bytes" not in c:
                    break  # a chain with a hole is only usable up to the hole
                if c.get("written") is False and not Path(str(c["path"])).exists():
                    # The save found this file and kept it, then a gc or an eviction (another save's, on this
                    # lane) deleted it before this report arrived: indexed, it would point at nothing.
                    log.debug("KV chunk %s was deleted while its save was in flight; chain ends before it",
                              c["key"])
                    break
                self.db.execute(
                    """INSERT INTO kv_chunks (key, parent, fingerprint, start, n_tokens, tokens, path, bytes,
                       created, last_used, swa_lo, state_end, n_swa) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
                       ON CONFLICT(key) DO UPDATE SET last_used = excluded.last_used, bytes = excluded.bytes,
                       swa_lo = excluded.swa_lo, state_end = excluded.state_end, n_swa = excluded.n_swa""",
                    [c["key"], c["parent"], fp, c["start"], c["n_tokens"], kvf.tokens_bytes(c["tokens"]),
                     self._rel(c["path"]), int(c["bytes"]), now, now, c.get("swa_lo"), c.get("state_end"),
                     c.get("n_swa")])
                tip, n_tokens = c["key"], c["start"] + c["n_tokens"]
            if tip:
                self.db.upsert("kv_entries", {"owner": owner, "fingerprint": fp, "tip": tip, "n_tokens": n_tokens,
                                              "updated": now, "last_used": now}, pk=("owner", "fingerprint"))
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
        if not chosen:
            return Match([], 0)
        n, keep = exact_point(chosen, min(pos, len(want) - 1))
        if keep < min(pos, len(want) - 1):
            log.info("KV lookup: %d tokens match, %d can be continued exactly from disk", pos, keep)
        return Match(chosen[:n], keep)

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
        later."""
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

        self.db.upsert("kv_speed", {"fingerprint": fp, "prefill_tok_s": blend("prefill_tok_s", prefill_tok_s),
                                    "restore_bytes_s": blend("restore_bytes_s", restore_bytes_s),
                                    "updated": time.time()}, pk="fingerprint")

    def prefill_speed(self, fp: str) -> float | None:
        """The prefill speed (tokens/s) measured on this computer for fingerprint ``fp``; None if never."""
        row = self.db.query("SELECT prefill_tok_s FROM kv_speed WHERE fingerprint = ?", [fp])
        value = row[0]["prefill_tok_s"] if row else None
        return float(value) if value else None

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


def exact_point(chain: Sequence[Mapping[str, Any]], keep: int) -> tuple[int, int]:
    """The longest restore of ``chain`` (chunk rows from position 0) that ends at most at ``keep`` and can be
    continued exactly: (chunks to load, tokens to keep). Dense rows (no window, no recurrent state) allow any
    point. A recurrent state allows only the end of a chunk whose state was taken there (``state_end``); a
    sliding window needs its last ``window`` positions before the point in the chunks' window cells
    (``swa_lo`` on), and the point must be a chunk's end: the engine read its prompts in pieces ending there (the
    interval marks, a prompt's end), so the cells before it are those a fresh prefill of the same tokens makes;
    a cut inside a chunk would keep cells read in a longer piece (docs/kv-format.md "Numerics")."""
    ends = sorted({int(c["start"]) + int(c["n_tokens"]) for c in chain if int(c["start"]) + int(c["n_tokens"]) < keep},
                  reverse=True)
    for p in [keep, *ends]:
        if p <= 0:
            break
        k = next(i for i, c in enumerate(chain) if int(c["start"]) < p <= int(c["start"]) + int(c["n_tokens"]))
        last = chain[k]
        end = int(last["start"]) + int(last["n_tokens"])
        if last.get("state_end") is not None and not p == end == int(last["state_end"]):
            continue
        window = int(last.get("n_swa") or 0)
        if window and p != end:
            continue
        low = max(0, p - window)
        if window and any(int(c["swa_lo"] if c.get("swa_lo") is not None else c["start"]) > max(int(c["start"]), low)
                          for c in chain[:k + 1] if int(c["start"]) + int(c["n_tokens"]) > low):
            continue
        return k + 1, p
    return 0, 0


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
