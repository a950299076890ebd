"""What saved KV costs and saves, and which of it goes first when the disk budget is exceeded.

Read-only policy over the ``kv`` tables that ``hisho.core.kv.index`` owns: one owner's (or every owner's)
``Usage`` in one SQL query, who is ``protected`` from eviction, and the eviction order (``plan_eviction``,
simulated in memory; ``KVIndex.evict`` applies it). Decisions: docs/kv-format.md.

Rules of use: any thread (the Database serialises); nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hisho.core.db import Database

DEFAULT_PREFILL_TOK_S = 250.0  # until measured (~250-300 tok/s on a 2-core x86-64 CPU, default model)
DEFAULT_RESTORE_BYTES_S = 2e9
DOCUMENT_PREFIX = "doc:"  # hisho.core.kv.session.document_owner

# One query for every owner's usage (a sidebar of 1,000 chats must not ask 1,000 times): walk each entry's
# chain tip -> root, then sum its chunks' bytes, and the bytes of chunks no other owner reaches.
_USAGE_SQL = """
WITH RECURSIVE chain(owner, fingerprint, key) AS (
    SELECT owner, fingerprint, tip FROM kv_entries
    UNION
    SELECT ch.owner, ch.fingerprint, c.parent FROM chain ch JOIN kv_chunks c ON c.key = ch.key
),
reach AS (SELECT ch.owner, ch.fingerprint, c.key, c.bytes FROM chain ch JOIN kv_chunks c ON c.key = ch.key),
users AS (SELECT key, COUNT(DISTINCT owner) AS n FROM reach GROUP BY key)
SELECT e.owner, e.fingerprint, e.n_tokens, e.pinned, e.last_used,
       COALESCE(SUM(r.bytes), 0) AS size, COALESCE(SUM(CASE WHEN u.n <= 1 THEN r.bytes ELSE 0 END), 0) AS own,
       s.prefill_tok_s AS prefill, s.restore_bytes_s AS restore
FROM kv_entries e
LEFT JOIN reach r ON r.owner = e.owner AND r.fingerprint = e.fingerprint
LEFT JOIN users u ON u.key = r.key
LEFT JOIN kv_speed s ON s.fingerprint = e.fingerprint
{where}
GROUP BY e.owner, e.fingerprint
"""


@dataclass
class Usage:
    """What one owner's saved KV costs and saves. Shared chunks (a document prefix two chats start with) count
    in full for every owner that needs them (``bytes``); ``own_bytes`` is what deleting the owner frees. The
    disk total (``KVIndex.total_bytes``) counts each chunk once, so owners' ``bytes`` may add up to more."""

    owner: str
    n_tokens: int
    bytes: int            # all chunks its prefix needs
    own_bytes: int        # chunks no other owner needs (what deleting it frees)
    seconds_saved: float  # estimated prefill avoided minus the restore
    pinned: bool = False  # evicted last (a pinned conversation; documents are always kept like pinned ones)
    last_used: float = 0.0
    # seconds_saved comes from a prefill speed measured on this computer for this model and KV type; without
    # one it rests on DEFAULT_PREFILL_TOK_S, a guess that must not be shown as a measurement.
    measured: bool = False


def protected(owner: str, pinned: bool) -> bool:
    """Owners eviction keeps longest: pinned conversations and documents (a document's prefix is what every
    question about it restores)."""
    return pinned or owner.startswith(DOCUMENT_PREFIX)


def read_usage(db: Database, owner: str | None = None) -> dict[str, Usage]:
    """Every owner's usage in one SQL query (or just ``owner``'s; shared-chunk counts still see everyone).
    An owner saved under several fingerprints (another model, another KV type) adds up its bytes; tokens
    and seconds saved are those of its best entry."""
    where, args = ("WHERE e.owner = ?", [owner]) if owner is not None else ("", [])
    out: dict[str, Usage] = {}
    for row in db.query(_USAGE_SQL.format(where=where), args):
        name, n_tokens, pinned, last_used = row["owner"], row["n_tokens"], row["pinned"], row["last_used"]
        size, own, prefill, restore = row["size"], row["own"], row["prefill"], row["restore"]
        saved = max(0.0, int(n_tokens) / float(prefill or DEFAULT_PREFILL_TOK_S)
                    - int(size) / float(restore or DEFAULT_RESTORE_BYTES_S))
        measured = prefill is not None and float(prefill) > 0
        u = out.get(name)
        if u is None:
            out[name] = Usage(name, int(n_tokens), int(size), int(own), saved, bool(pinned), float(last_used),
                              measured)
        else:
            if saved > u.seconds_saved or (measured and not u.measured):
                u.seconds_saved, u.measured = saved, measured
            u.n_tokens = max(u.n_tokens, int(n_tokens))
            u.bytes, u.own_bytes = u.bytes + int(size), u.own_bytes + int(own)
            u.pinned, u.last_used = u.pinned or bool(pinned), max(u.last_used, float(last_used))
    return out


def plan_eviction(db: Database, budget: int) -> list[tuple[str, str]]:
    """The (owner, fingerprint) entries to drop, in order, until the chunk files fit ``budget`` bytes.

    Order (docs/kv-format.md): least recently used first among unprotected owners that hold at least one chunk
    no protected owner needs (a chunk shared with a pinned chat or a document counts as protected: dropping
    such an owner would free nothing); only when those are gone, protected owners, least recently used first.
    Simulated on reference counts in memory; the caller changes the database once, after."""
    rows = {r["key"]: r for r in db.query("SELECT key, parent, bytes FROM kv_chunks")}
    total = sum(int(r["bytes"]) for r in rows.values())
    if total <= budget:
        return []
    entries = [(str(e["owner"]), str(e["fingerprint"]), protected(str(e["owner"]), bool(e["pinned"])),
                chain(rows, e["tip"]))
               for e in db.query("SELECT * FROM kv_entries ORDER BY last_used ASC")]
    refs: dict[str, int] = {}
    kept: dict[str, int] = {}  # references from protected entries
    for _o, _f, prot, keys in entries:
        for k in keys:
            refs[k] = refs.get(k, 0) + 1
            kept[k] = kept.get(k, 0) + prot
    alive = list(range(len(entries)))
    victims: list[tuple[str, str]] = []
    while total > budget and alive:
        pick = next((i for i in alive if not entries[i][2] and any(kept[k] == 0 for k in entries[i][3])),
                    None)
        if pick is None:  # what is left is protected, or only reachable through protected owners
            pick = next((i for i in alive if entries[i][2]), alive[0])
        alive.remove(pick)
        owner, fp, prot, keys = entries[pick]
        for k in keys:
            refs[k] -= 1
            kept[k] -= prot
            if refs[k] == 0:
                total -= int(rows[k]["bytes"])
        victims.append((owner, fp))
    return victims


def chain(rows: dict[str, Any], tip: str) -> list[str]:
    """The chunk keys from ``tip`` back to the root (``rows``: key -> row with a ``parent``)."""
    out, key, seen = [], tip, set()
    while key in rows and key not in seen:
        seen.add(key)
        out.append(key)
        key = rows[key]["parent"]
    return out
