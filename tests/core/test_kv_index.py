"""The KV index on a real SQLite file and real chunk files: lookup, sharing, deletion, budget, repair."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from hisho.core.db import Database
from hisho.core.kv import format as kvf
from hisho.core.kv.index import KVIndex

FP = kvf.fingerprint({"model": "test"})
BYTES_PER_TOKEN = 100


@pytest.fixture
def index(tmp_path: Path) -> KVIndex:
    return KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")


def save(index: KVIndex, owner: str, tokens: list[int], chunk: int = 4) -> list[dict[str, Any]]:
    """Write chunk files the way the engine does (payload: fake state bytes) and record them."""
    records = []
    for plan in kvf.plan_chunks(FP, tokens, chunk):
        path = kvf.chunk_path(index.kv_dir, FP, plan.key)
        part = tokens[plan.start:plan.end]
        rec = {"key": plan.key, "parent": plan.parent, "start": plan.start, "n_tokens": plan.n_tokens,
               "path": str(path), "tokens": part}
        if path.exists():
            rec["bytes"] = path.stat().st_size
        else:
            payload = bytes(BYTES_PER_TOKEN * len(part))
            rec["bytes"] = kvf.write_atomic(path, kvf.encode_header(FP, plan, part, payload), payload)
        records.append(rec)
    index.record_save(owner, FP, records)
    return records


def files(index: KVIndex) -> set[Path]:
    return {p for p in index.kv_dir.rglob("*") if p.is_file()}


def test_lookup_finds_the_longest_saved_prefix(index: KVIndex) -> None:
    save(index, "conv:1", list(range(10)))
    m = index.lookup(FP, list(range(10)) + [50, 51])
    assert [c["start"] for c in m.chunks] == [0, 4, 8] and m.keep == 10
    m = index.lookup(FP, list(range(6)) + [99, 98, 97])  # diverges inside the second chunk: load it, trim
    assert [c["start"] for c in m.chunks] == [0, 4] and m.keep == 6
    m = index.lookup(FP, list(range(10)))  # the whole prompt is saved: keep one token back for logits
    assert m.keep == 9
    assert index.lookup(FP, [7, 7, 7]).chunks == []
    assert index.lookup(kvf.fingerprint({"model": "other"}), list(range(12))).chunks == []


def test_shared_prefix_is_stored_once_and_survives_deleting_one_owner(index: KVIndex) -> None:
    doc = list(range(100, 116))
    save(index, "conv:1", doc + [1, 2, 3])
    one = index.total_bytes()
    save(index, "conv:2", doc + [7, 8])
    assert index.total_bytes() < 1.2 * one
    both = files(index)
    u1, u2 = index.usage("conv:1"), index.usage("conv:2")
    assert u1.n_tokens == 19 and u1.bytes > u1.own_bytes > 0 and u2.own_bytes > 0
    freed = index.delete_owner("conv:1")
    assert freed == u1.own_bytes
    assert len(files(index)) == len(both) - 1  # only conv 1's tail went
    m = index.lookup(FP, doc + [7, 8, 9])
    assert m.keep == 18
    index.delete_owner("conv:2")
    assert files(index) == set() and index.total_bytes() == 0


def test_growing_conversation_drops_its_old_tail(index: KVIndex) -> None:
    save(index, "conv:1", list(range(6)))
    save(index, "conv:1", list(range(10)))
    index.gc()
    assert sorted(r["start"] for r in index.db.query("SELECT start FROM kv_chunks")) == [0, 4, 8]
    assert len(files(index)) == 3


def test_budget_evicts_least_recently_used_and_keeps_pinned_and_documents_longest(index: KVIndex) -> None:
    save(index, "conv:1", [1] * 8)
    save(index, "doc:3", [3] * 8)
    save(index, "conv:2", [2] * 8)
    save(index, "conv:4", [4] * 8)
    index.set_pinned("conv:1", True)
    for owner in ("conv:2", "doc:3", "conv:1", "conv:4"):  # least recently used first
        index.touch(owner)
        time.sleep(0.01)
    each = index.usage("conv:2").bytes
    assert index.evict(3 * each) == ["conv:2"]  # the oldest unprotected chat, though the document is older
    assert index.evict(2 * each) == ["conv:4"]  # then the other unprotected one, however recent
    assert index.evict(each) == ["doc:3"]       # then protected owners, least recently used first
    assert index.lookup(FP, [1] * 9).keep == 8 and index.usage("doc:3").bytes == 0
    assert index.evict(0) == ["conv:1"] and files(index) == set()
    assert index.evict(0) == []


def test_chunks_shared_with_a_protected_owner_count_as_protected(index: KVIndex) -> None:
    doc = list(range(100, 116))  # 4 chunks of 4 tokens
    save(index, "doc:d", doc)
    save(index, "conv:1", doc + [1, 2, 3, 4])  # the document's chunks + one of its own
    save(index, "conv:2", [9] * 8)
    for owner in ("conv:1", "conv:2", "doc:d"):
        index.touch(owner)
        time.sleep(0.01)
    total, chunk = index.total_bytes(), index.usage("conv:2").bytes // 2
    # conv:1 is the least recently used chat that holds a chunk of its own: dropping it frees only that chunk.
    assert index.evict(total - 1) == ["conv:1"]
    assert index.total_bytes() == total - chunk
    assert index.usage("doc:d").bytes == 4 * chunk  # the shared prefix stayed with the document
    # A chat entirely inside a document's prefix frees nothing: it is kept until the document goes.
    save(index, "conv:3", doc[:8])
    index.touch("conv:3")
    assert index.evict(index.total_bytes() - 1) == ["conv:2"]
    assert index.usage("conv:3").bytes == 2 * chunk
    assert index.evict(chunk) == ["doc:d", "conv:3"] and index.total_bytes() == 0


def test_usage_of_all_owners_in_one_query_matches_one_by_one(index: KVIndex) -> None:
    doc = list(range(100, 116))
    save(index, "doc:d", doc)
    for i in range(1, 30):
        save(index, f"conv:{i}", doc[: 4 * (i % 4 + 1)] + [i] * (i % 7 + 1))
    index.set_pinned("conv:5", True)
    index.record_speed(FP, prefill_tok_s=100.0, restore_bytes_s=1e6)
    every = index.usage_all()
    assert len(every) == 30
    for owner, u in every.items():
        one = index.usage(owner)
        assert (one.bytes, one.own_bytes, one.n_tokens, one.pinned) == (u.bytes, u.own_bytes, u.n_tokens, u.pinned)
        assert one.seconds_saved == pytest.approx(u.seconds_saved)
    assert every["conv:5"].pinned and not every["conv:6"].pinned
    # Attribution: each owner counts every chunk it needs; the disk total counts each chunk once.
    assert sum(u.bytes for u in every.values()) > index.total_bytes()
    assert sum(u.own_bytes for u in every.values()) < index.total_bytes()
    assert index.usage("conv:404") == index.usage("conv:404") and index.usage("conv:404").bytes == 0


def test_clear_deletes_every_file_and_row(index: KVIndex) -> None:
    save(index, "conv:1", list(range(10)))
    save(index, "doc:2", list(range(50, 60)))
    index.record_speed(FP, prefill_tok_s=123.0)
    stray = index.kv_dir / FP[:16] / f"{'d' * 32}{kvf.SUFFIX}{kvf.TMP_MARK}999999999"
    stray.write_bytes(b"z")
    before = sum(p.stat().st_size for p in files(index))
    assert index.clear() == before
    assert files(index) == set() and index.total_bytes() == 0 and index.usage_all() == {}
    assert index.db.query_one("SELECT prefill_tok_s FROM kv_speed")[0] == pytest.approx(123.0)
    save(index, "conv:1", list(range(10)))  # still usable afterwards
    assert index.lookup(FP, list(range(11))).keep == 10


def test_reconcile_repairs_rows_without_files_and_files_without_rows(index: KVIndex) -> None:
    recs = save(index, "conv:1", list(range(8)))
    Path(recs[1]["path"]).unlink()  # index row without file
    stray = index.kv_dir / FP[:16] / ("f" * 32 + kvf.SUFFIX)  # file without index row
    stray.write_bytes(b"x" * 10)
    old = time.time() - 3600
    os.utime(stray, (old, old))
    fresh = index.kv_dir / FP[:16] / ("e" * 32 + kvf.SUFFIX)  # maybe a save in flight: left alone
    fresh.write_bytes(b"y")
    dead_tmp = index.kv_dir / FP[:16] / f"{'d' * 32}{kvf.SUFFIX}{kvf.TMP_MARK}999999999"  # writer died
    dead_tmp.write_bytes(b"z")
    report = index.reconcile()
    assert report["rows_without_file"] == 1 and report["files_removed"] == 2
    assert not stray.exists() and not dead_tmp.exists() and fresh.exists()
    assert index.lookup(FP, list(range(8)) + [1]).keep == 4  # what is left still restores


def test_seconds_saved_uses_measured_prefill_speed(index: KVIndex) -> None:
    save(index, "conv:1", list(range(1000)), chunk=256)
    index.record_speed(FP, prefill_tok_s=100.0, restore_bytes_s=1e9)
    assert index.usage("conv:1").seconds_saved == pytest.approx(10.0, rel=0.01)
    index.record_speed(FP, prefill_tok_s=200.0)
    assert index.usage("conv:1").seconds_saved == pytest.approx(1000 / 130.0, rel=0.01)


def test_remove_chunk_deletes_the_file(index: KVIndex) -> None:
    recs = save(index, "conv:1", list(range(8)))
    index.remove_chunk(recs[0]["key"], "test")
    assert not Path(recs[0]["path"]).exists()
    assert index.lookup(FP, list(range(9))).chunks == []


def test_stored_items_are_named_after_their_chats_and_documents(tmp_path: Path) -> None:
    from hisho.core.conversations.store import ConversationStore
    from hisho.core.documents.ask import Attachment, save_attachment
    from hisho.core.documents.cache import SummaryCache
    from hisho.core.kv.stored import conversation_usage, list_stored

    db = Database(tmp_path / "db.sqlite3")
    index = KVIndex(db, tmp_path / "kv")
    assert list_stored(index, 100).items == []  # no tables for documents yet: plain, no error
    store = ConversationStore(db)
    chat = store.create("Trip ideas")
    summary = store.create("Summary: report.pdf")
    save_attachment(SummaryCache(db).db, summary.id, Attachment("whole", "", "note"), ["ab" * 32])
    gone = store.create("Old")
    store.delete(gone.id)
    save(index, f"conv:{chat.id}", list(range(10)))
    save(index, "doc:" + "ab" * 32, list(range(20, 36)))
    save(index, f"conv:{gone.id}", list(range(40, 44)))
    index.touch(f"conv:{chat.id}")
    report = list_stored(index, 10**9)
    names = [(i.kind, i.name, i.conversation_id, i.kept) for i in report.items]
    assert names[0] == ("chat", "Trip ideas", chat.id, False)  # most recently used first
    assert ("document", "report.pdf", summary.id, True) in names
    assert ("chat", f"Deleted chat #{gone.id}", gone.id, False) in names
    assert report.total_bytes == index.total_bytes() and report.budget_bytes == 10**9
    by_chat = conversation_usage(index)
    assert set(by_chat) == {chat.id, gone.id} and by_chat[chat.id].n_tokens == 10


def test_usage_of_a_thousand_owners_is_one_statement(index: KVIndex) -> None:
    doc = list(range(100, 108))
    save(index, "doc:d", doc)
    for i in range(1000):
        plans = kvf.plan_chunks(FP, doc + [i], 4)
        index.record_save(f"conv:{i}", FP, [  # rows only: the statement count does not depend on files
            {"key": p.key, "parent": p.parent, "start": p.start, "n_tokens": p.n_tokens,
             "path": str(kvf.chunk_path(index.kv_dir, FP, p.key)), "tokens": (doc + [i])[p.start:p.end],
             "bytes": 10 * p.n_tokens} for p in plans])
    statements: list[str] = []
    index.db.conn.set_trace_callback(statements.append)
    try:
        every = index.usage_all()
    finally:
        index.db.conn.set_trace_callback(None)
    assert len(statements) == 1 and len(every) == 1001
    assert every["conv:7"].bytes == 90 and every["conv:7"].own_bytes == 10


def test_an_unindexed_chunk_goes_at_once_when_this_instance_is_alone(tmp_path: Path) -> None:
    """A client killed between the engine's rename and the index row leaves a chunk file: with the
    data folder's instance lock held nothing else can be saving, so it is removed now, not two minutes later."""
    from hisho.core.db import Database
    from hisho.core.kv.index import KVIndex

    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    orphan = tmp_path / "kv" / "0123456789abcdef" / "feedface.hkv"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x" * 4096)
    assert index.reconcile()["files_removed"] == 0 and orphan.exists()  # maybe a save in flight elsewhere
    assert index.reconcile(alone=True)["files_removed"] == 1 and not orphan.exists()


def test_a_version_1_index_gains_the_model_table_and_keeps_its_snapshots(tmp_path: Path) -> None:
    from hisho.core.kv import index as index_mod

    db = Database(tmp_path / "db.sqlite3")
    db.migrate(index_mod.COMPONENT, index_mod.STEPS[:1])  # the index as the first release left it
    db.execute("INSERT INTO kv_entries VALUES ('conv:1', ?, 'tip', 4, 0, 1.0, 1.0)", [FP])

    index = KVIndex(db, tmp_path / "kv")
    assert db.version(index_mod.COMPONENT) == len(index_mod.STEPS)
    assert db.query_one("SELECT COUNT(*) FROM kv_entries") == (1,)
    assert index.model_fingerprints({"xxh3_128": "x", "size": 1}, "/m.gguf") == []  # saved before: not known
    save(index, "conv:2", list(range(8)))
    index.record_save("conv:2", FP, [], {"path": "/m.gguf", "size": 1, "xxh3_128": "x"})
    assert index.model_fingerprints({"xxh3_128": "x", "size": 1}, "/elsewhere.gguf") == [FP]
    assert index.model_fingerprints(None, "/m.gguf") == [FP]
    assert index.snapshots([FP]) == (2, sum(p.stat().st_size for p in files(index)))


def _row(start: int, n: int, swa_lo: int | None = None, state_end: int | None = None,
         n_swa: int = 0) -> dict[str, int | None]:
    return {"start": start, "n_tokens": n, "swa_lo": swa_lo, "state_end": state_end, "n_swa": n_swa}


def test_exact_point_lets_dense_chunks_be_cut_anywhere() -> None:
    from hisho.core.kv.index import exact_point

    assert exact_point([_row(0, 512), _row(512, 100)], 600) == (2, 600)
    assert exact_point([_row(0, 512), _row(512, 100)], 300) == (1, 300)


def test_exact_point_needs_the_window_before_the_point_in_the_window_cells() -> None:
    from hisho.core.kv.index import exact_point

    # Saved at 1100 tokens with the window cache holding 600 on: chunk 0 has no window cells, chunk 1 from 600.
    chain = [_row(0, 512, swa_lo=512, n_swa=128), _row(512, 512, swa_lo=896, n_swa=128),
             _row(1024, 76, swa_lo=1024, n_swa=128)]
    assert exact_point(chain, 1100) == (3, 1100)      # the window 972..1099 is in chunks 1 and 2
    assert exact_point(chain, 1030) == (2, 1024)      # inside a chunk: its start, where the window 896.. is held
    chain[1]["swa_lo"] = 1000
    assert exact_point(chain, 1030) == (0, 0)         # 896..1023 needed, chunk 1 holds 1000 on; at 512 neither
    chain[0]["swa_lo"] = 384
    assert exact_point(chain, 1030) == (1, 512)       # a copy taken at an interval checkpoint held the window
    assert exact_point(chain, 500) == (0, 0)          # never inside a chunk: cells read in a longer piece


def test_exact_point_offers_a_recurrent_state_only_at_the_end_it_was_taken() -> None:
    from hisho.core.kv.index import exact_point

    # A document saved alone (its tail's state at 1100), then a chat on it: chunks 0-1 carry the chat's state.
    chain = [_row(0, 512, state_end=1500), _row(512, 512, state_end=1500), _row(1024, 76, state_end=1100)]
    assert exact_point(chain, 1100) == (3, 1100)
    assert exact_point(chain, 1099) == (0, 0)         # inside the tail: a state cannot be cut back
    assert exact_point(chain[:2], 1023) == (0, 0)


def test_a_save_whose_kept_file_was_deleted_in_flight_does_not_index_it(index: KVIndex) -> None:
    """The engine keeps a chunk file that exists (``written`` false), writes the rest and reports later; if a gc
    or an eviction on the store lane deletes that file meanwhile (its only owner evicted, or a chat's old tail
    superseded), the report must not index it again: the index would point at a missing file, and every
    request with that prefix would log "KV chunk not restored: FileNotFoundError"."""
    tokens = list(range(300, 312))
    report = save(index, "conv:1", tokens)  # three chunks on disk
    for rec in report:
        rec["written"] = False  # the second save (another owner, same prefix) found all three files
    index.delete_owner("conv:1")  # ... and before its report came, they were deleted
    assert not files(index)
    assert index.record_save("api:1", FP, report) == 0
    assert index.lookup(FP, tokens + [1]).chunks == []
    # A kept file that is still there is indexed as before; the chain ends at the first one that is gone.
    report = save(index, "conv:2", tokens)
    for rec in report:
        rec["written"] = False
    Path(report[2]["path"]).unlink()
    index.delete_owner("conv:2")  # gc: rows and files gone
    save(index, "conv:3", tokens[:8])  # the first two chunks written again
    assert index.record_save("api:2", FP, report) == 8
    m = index.lookup(FP, tokens + [1])
    assert [c["start"] for c in m.chunks] == [0, 4] and all(Path(c["path"]).exists() for c in m.chunks)
