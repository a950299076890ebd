"""Per-sequence KV state to and from chunk files (format: hisho.core.kv.format; decisions: docs/kv-format.md).

Rules of use:
- ``KVState`` belongs to one ``Runtime`` and runs on the engine thread only. ``ChunkWriter``
  (``hisho.engine.kv.chunkwriter``) is the one other thread: it gets bytes already copied out of llama.cpp, so
  writing to disk never touches the context.
- Bytes go through buffers allocated once and reused (``Arena``): first-touch page faults on a fresh buffer
  cost more than reading the file (docs/kv-format.md, "Reading"). ``prepare(n)`` touches them ahead of time.
- A chunk ``[start, end)`` of a sequence is copied out through a scratch sequence (the last one, when
  ``n_seq_max >= 2`` and the KV cache is unified): ``seq_cp`` tags the cells, ``state_seq_get_data`` copies them.
  Restore loads chunk 0 straight into the sequence and later chunks through the scratch sequence, then
  ``seq_cp`` (a metadata operation in a unified cache). Without a scratch sequence a save is one chunk.
- Nothing unverified reaches llama.cpp: header, fingerprint, key, token range and payload checksum are checked
  first. A failed chunk stops the restore at the previous one; its file is reported, never loaded.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import ErrorKind, common_prefix
from hisho.core.kv import format as kvf
from hisho.engine.kv.chunkwriter import Arena, ChunkWriter, Job
from hisho.engine.kv.kvfacts import state_facts
from hisho.engine.model.prefix import PrefixKeeper
from hisho.engine.model.runtime import RequestError, Runtime

log = logging.getLogger("hisho.kv")

class KVState:
    """Save and restore sequences of one runtime. Engine thread only."""

    def __init__(self, rt: Runtime, writer: ChunkWriter) -> None:
        self.rt = rt
        self.writer = writer
        self.facts = state_facts(rt)
        self.fingerprint = kvf.fingerprint(self.facts)
        # Which model file the fingerprint belongs to, for the index (deleting a model names its snapshots).
        self.model = {"path": os.path.realpath(rt.params.model_path), **self.facts["gguf"]}
        unified = rt.params.kv_unified or rt.n_seq_max == 1
        self.scratch = rt.n_seq_max - 1 if rt.n_seq_max >= 2 and unified else -1
        self.staging = Arena()   # restore fallback where files cannot be mapped
        self._mapped: tuple[mmap.mmap, Any] | None = None

    @property
    def keeper(self) -> PrefixKeeper:
        return self.rt.keeper  # one per context (a job context has its own)

    def info(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "facts": self.facts, "scratch_seq": self.scratch}

    def prepare(self, n_bytes: int) -> dict[str, Any]:
        """Touch a save arena of ``n_bytes`` now, so the first save after a load copies at full speed."""
        start = time.perf_counter()
        self.writer.give_arena(self.writer.take_arena(n_bytes))
        return {"seconds": time.perf_counter() - start}

    # ----- save -------------------------------------------------------------------------------------

    def save(self, seq: int, kv_dir: Path, chunk_tokens: int, done: Callable[[dict[str, Any]], None],
             hooks: dict[str, Any] | None = None) -> dict[str, Any]:
        """Copy the new chunks of ``seq`` into an arena and queue them for writing. ``done`` gets the report
        (on the writer thread, or at once when nothing is new). Returns the copy timings."""
        rt = self.rt
        tokens = list(rt.seqs.get(seq, []))
        if self.scratch < 0 or seq == self.scratch:
            chunk_tokens = 0
        plans = kvf.plan_chunks(self.fingerprint, tokens, chunk_tokens)
        records, todo = [], []
        pos_min = int(llama_cpp.llama_memory_seq_pos_min(rt.memory, seq))
        for plan in plans:
            path = kvf.chunk_path(kv_dir, self.fingerprint, plan.key)
            rec = {"key": plan.key, "parent": plan.parent, "start": plan.start, "n_tokens": plan.n_tokens,
                   "path": str(path), "written": False, "tokens": tokens[plan.start:plan.end],
                   **self._resume(seq, plan, len(tokens), pos_min)}
            old = self._existing(path)
            if old is not None and not self._better(rec, old):
                rec.update(bytes=path.stat().st_size, **old)
            else:
                todo.append((plan, rec))
            records.append(rec)
        start = time.perf_counter()
        parts, arena = self._copy_out(seq, len(tokens), todo, tokens)
        copy_s = time.perf_counter() - start
        summary = {"fingerprint": self.fingerprint, "n_tokens": len(tokens), "copy_s": copy_s,
                   "copied_bytes": sum(p[3] for p in parts), "model": self.model}

        def finish(_: list[dict[str, Any]]) -> None:
            done({**summary, "chunks": records})

        if not parts:
            finish([])
            return summary
        hooks = hooks or {}
        self.writer.submit(Job(arena, parts, finish, float(hooks.get("delay_s", 0.0)),
                                int(hooks.get("fail_after", -1))))
        return summary

    def _copy_out(self, seq: int, n_held: int, todo: list[tuple[kvf.ChunkPlan, dict[str, Any]]],
                  tokens: list[int]) -> tuple[list[tuple[dict[str, Any], bytes, int, int]], Arena]:
        rt = self.rt
        sizes = []
        for plan, _ in todo:
            src = self._isolate(seq, plan, n_held)
            sizes.append((src, int(llama_cpp.llama_state_seq_get_size(rt.ctx, src))))
        arena = self.writer.take_arena(sum(s for _, s in sizes)) if todo else Arena()
        parts, offset = [], 0
        for (plan, rec), (src, size) in zip(todo, sizes):
            if src == self.scratch:
                self._isolate(seq, plan, n_held)  # the scratch sequence holds one chunk at a time
            got = int(llama_cpp.llama_state_seq_get_data(rt.ctx, arena.ptr(offset), size, src))
            if got != size:
                raise RequestError(ErrorKind.STATE, f"llama.cpp wrote {got} of {size} state bytes")
            header = kvf.encode_header(self.fingerprint, plan, tokens[plan.start:plan.end],
                                       arena.view(offset, size), None if self.keeper.dense else
                                       {k: rec[k] for k in ("swa_lo", "state_end", "n_swa")})
            parts.append((rec, header, offset, size))
            offset += size
        self._clear_scratch()
        return parts, arena

    def _resume(self, seq: int, plan: kvf.ChunkPlan, n_held: int, pos_min: int) -> dict[str, int | None]:
        """What a restore ending at this chunk can continue from (kvf.ChunkHeader): the lowest window cell the
        copy holds (the window cache keeps ``pos_min`` on; a copy of ``[start, end)`` drops cells out of the
        window of ``end - 1``), and the position the recurrent state has seen: the tail carries the sequence's,
        at its last position; a chunk ending where an interval checkpoint was taken carries that checkpoint's
        window or state (``_isolate``); the others leave the state out (``kvf.NO_STATE``)."""
        keeper = self.keeper
        if keeper.dense:
            return {"swa_lo": None, "state_end": None, "n_swa": 0}
        marked = plan.end != n_held and keeper.interval_at(seq, plan.end) is not None
        swa_lo = None
        if keeper.n_swa:
            lo = max(plan.start, plan.end - keeper.n_swa, plan.start if marked else pos_min)
            swa_lo = lo if lo < plan.end else plan.end
        state_end = (n_held if plan.end == n_held else plan.end if marked else kvf.NO_STATE) \
            if keeper.recurrent else None
        return {"swa_lo": swa_lo, "state_end": state_end, "n_swa": keeper.n_swa}

    def _existing(self, path: Path) -> dict[str, Any] | None:
        """The memory facts of a chunk file already there (None: no usable file). Dense models: the file's
        existence is enough (its key names every token, as before)."""
        if not path.exists():
            return None
        if self.keeper.dense:
            return {}
        try:
            with open(path, "rb", buffering=0) as fh:
                return kvf.read_header(fh, os.fstat(fh.fileno()).st_size).resume()  # type: ignore[arg-type]
        except (kvf.KVFormatError, OSError):
            return None  # written again

    def _better(self, new: dict[str, Any], old: dict[str, Any]) -> bool:
        """Whether this save's copy of a chunk lets more restores continue exactly than the file there: the
        recurrent state at the chunk's end where the file's is not, or more of the window."""
        if self.keeper.dense:
            return False
        end = int(new["start"]) + int(new["n_tokens"])
        if new["state_end"] == end and old.get("state_end") != end:
            return True
        old_lo = old.get("swa_lo")
        return new["swa_lo"] is not None and (old_lo is None or int(new["swa_lo"]) < int(old_lo))

    def _isolate(self, seq: int, plan: kvf.ChunkPlan, n_held: int) -> int:
        """The sequence whose state is exactly ``plan``'s range: ``seq`` itself or the scratch sequence. A chunk
        ending where ``seq`` has a checkpoint gets that checkpoint's partial state (the window of its end, or the
        recurrent state there) in place of what the live sequence holds now, so a restore can end there."""
        if plan.start == 0 and plan.end == n_held:
            return seq
        if self.scratch < 0:
            raise RequestError(ErrorKind.STATE, "a partial range needs a scratch sequence (n_seq_max >= 2)")
        self._clear_scratch()
        keeper = self.keeper
        keeper.note_empty(self.scratch)
        llama_cpp.llama_memory_seq_cp(self.rt.memory, seq, self.scratch, plan.start, plan.end)
        if plan.end == n_held:
            return self.scratch
        ck = keeper.interval_at(seq, plan.end)
        if ck is not None and keeper.load_partial(self.scratch, ck):
            if keeper.n_swa:
                # The checkpoint's window reaches below the chunk: those cells belong to the chunks before it (each
                # file holds window cells of its own range only, or a restore would load a position twice).
                llama_cpp.llama_memory_seq_rm(self.rt.memory, self.scratch, 0, plan.start)
        elif ck is not None:
            raise RequestError(ErrorKind.STATE, f"the checkpoint at {plan.end} did not load into the scratch sequence")
        elif not keeper.drop_state(self.scratch) and keeper.recurrent:
            raise RequestError(ErrorKind.STATE, "could not leave the recurrent state out of a chunk")
        return self.scratch

    def _clear_scratch(self) -> None:
        if self.scratch >= 0:
            llama_cpp.llama_memory_seq_rm(self.rt.memory, self.scratch, -1, -1)
            self.rt.seqs.pop(self.scratch, None)

    # ----- restore ----------------------------------------------------------------------------------

    def restore(self, seq: int, chunks: list[dict[str, Any]], keep: int,
                want: list[int] | None = None, *, use_map: bool = True) -> dict[str, Any]:
        """Load ``chunks`` (in order, from position 0) into ``seq``, then keep its first ``keep`` tokens.
        A chunk that fails verification or loading stops the restore; what loaded before it stays.
        Nothing is loaded when ``seq`` already holds at least ``keep`` tokens of the prompt ``want``."""
        rt = self.rt
        if want is not None:
            common = common_prefix(rt.seqs.get(seq, []), want)
            if common >= keep:
                return {"restored": common, "loaded_tokens": 0, "bytes": 0, "failed": [], "skipped": True}
        rt.seq_rm(seq, 0)
        tokens: list[int] = []
        loaded: list[kvf.ChunkHeader] = []
        failed: list[dict[str, str]] = []
        t = {"read_s": 0.0, "verify_s": 0.0, "set_s": 0.0}
        n_bytes = 0
        for i, chunk in enumerate(chunks):
            ptr = None
            if i + 1 < len(chunks):
                _read_ahead(Path(str(chunks[i + 1].get("path"))))  # the disk reads it while this one loads
            try:
                header, ptr = self._read_verified(chunk, len(tokens), t, use_map)
                self._load_payload(seq, header, ptr, first=(i == 0), timings=t)
            except (kvf.KVFormatError, OSError) as exc:
                reason = str(exc) if isinstance(exc, kvf.KVFormatError) else f"{type(exc).__name__}: {exc}"
                # A file gone since the lookup (evicted, or superseded by a save) is a cache miss, not damage.
                (log.debug if isinstance(exc, FileNotFoundError) else log.warning)(
                    "KV chunk %s not restored: %s", chunk.get("path"), reason)
                failed.append({"path": str(chunk.get("path")), "key": str(chunk.get("key")), "reason": reason})
                break
            finally:
                ptr = None  # drop the pointer into the mapping before unmapping it
                self._unmap()
            tokens.extend(header.tokens)
            n_bytes += header.payload_bytes
            loaded.append(header)
        keep = max(0, min(keep, len(tokens)))
        if not self._consistent(seq, len(tokens)):
            log.warning("KV restore left sequence %d inconsistent; clearing it", seq)
            tokens, keep = [], 0
        rt.seqs[seq] = tokens
        if self.keeper.n_swa and loaded:
            self.keeper.floor[seq] = window_floor(loaded)
        # Checked even when nothing is cut: a window or state the chunks lack; never inside an image.
        keep = rt.keep_upto(seq, tokens, keep)
        rt.keeper.checkpoint(seq)
        return {"restored": keep, "loaded_tokens": len(tokens), "bytes": n_bytes, "failed": failed, **t}

    def _read_verified(self, chunk: dict[str, Any], start: int, t: dict[str, float],
                       use_map: bool) -> tuple[kvf.ChunkHeader, Any]:
        """Open a chunk, check everything, and return its header and a pointer to the verified payload.
        The payload is the file mapped copy-on-write (no copy: reading it into a buffer costs as much as the
        restore itself); where mapping fails it is read into the reused staging buffer."""
        path = Path(str(chunk["path"]))
        t0 = time.perf_counter()
        self._unmap()
        with open(path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            header = kvf.read_header(fh, size)  # type: ignore[arg-type]
            if header.fingerprint != self.fingerprint:
                raise kvf.KVFormatError("saved by another model, library or KV type (fingerprint differs)")
            if header.key != chunk.get("key") or header.start != start:
                raise kvf.KVFormatError("chunk does not continue the restored prefix")
            view, ptr = self._map(fh, header) if header.payload_bytes and use_map else (None, None)
            if view is None:
                view, ptr = self._read_into_staging(fh, header)
        t1 = time.perf_counter()
        ok = kvf.payload_ok(header, view)
        t["read_s"] += t1 - t0
        t["verify_s"] += time.perf_counter() - t1
        if not ok:
            raise kvf.KVFormatError("payload checksum mismatch (damaged file)")
        return header, ptr

    def _map(self, fh: Any, header: kvf.ChunkHeader) -> tuple[Any, Any]:
        # Files are only ever replaced by rename (a new inode), never rewritten in place, so the mapped bytes
        # cannot change between the checksum and llama.cpp reading them.
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError):
            return None, None
        if hasattr(mm, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
            # One read-ahead of the whole file instead of page faults of a read-ahead window each: from a cold
            # page cache the checksum pass would otherwise read a 16K conversation in ~128 KiB steps.
            mm.madvise(mmap.MADV_WILLNEED)
        arr = (ctypes.c_uint8 * header.payload_bytes).from_buffer(mm, header.payload_offset)
        self._mapped = (mm, arr)
        # The pointer from the array's address: ``ctypes.cast(arr, ...)`` makes a reference cycle that keeps the
        # map exported past ``_unmap`` (close raised BufferError), so restored files stayed mapped and cached.
        return memoryview(arr).cast("B"), ctypes.cast(ctypes.addressof(arr), ctypes.POINTER(ctypes.c_uint8))

    def _unmap(self) -> None:
        if self._mapped is not None:
            mm, arr = self._mapped
            self._mapped = None
            del arr
            try:
                mm.close()
            except BufferError:
                pass  # a view is still alive (an exception's frame); the map closes when it is collected

    def _read_into_staging(self, fh: Any, header: kvf.ChunkHeader) -> tuple[Any, Any]:
        self.staging.ensure(header.payload_bytes)
        view = self.staging.view(0, header.payload_bytes)
        got = 0
        while got < header.payload_bytes:
            n = fh.readinto(view[got:])
            if not n:
                raise kvf.KVFormatError("truncated payload")
            got += n
        return view, self.staging.ptr(0)

    def _load_payload(self, seq: int, header: kvf.ChunkHeader, ptr: Any, *, first: bool,
                      timings: dict[str, float]) -> None:
        rt = self.rt
        target = seq if first else self.scratch
        if target < 0:
            raise kvf.KVFormatError("a multi-chunk restore needs a scratch sequence (n_seq_max >= 2)")
        t0 = time.perf_counter()
        n = int(llama_cpp.llama_state_seq_set_data(rt.ctx, ptr, header.payload_bytes, target))
        if n == 0:
            # llama.cpp clears the target sequence when it rejects a state.
            raise kvf.KVFormatError("llama.cpp rejected the state (layout or type mismatch)")
        if not first:
            llama_cpp.llama_memory_seq_cp(rt.memory, self.scratch, seq, -1, -1)
            self._clear_scratch()
        timings["set_s"] += time.perf_counter() - t0

    def _consistent(self, seq: int, n_tokens: int) -> bool:
        pos_max = int(llama_cpp.llama_memory_seq_pos_max(self.rt.memory, seq))
        return pos_max + 1 == n_tokens


def _read_ahead(path: Path) -> None:
    """Ask the kernel to start reading ``path`` into the page cache now (no wait; a no-op where unsupported)."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return   # the restore reports the missing file when it gets there
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def window_floor(chunks: list[kvf.ChunkHeader]) -> int:
    """The lowest position from which the window cells restored from ``chunks`` (in order) run without a hole
    up to the end: each file holds the window cells ``[swa_lo, end)`` of its own range."""
    floor = chunks[-1].end
    for header in reversed(chunks):
        lo = header.start if header.swa_lo is None else header.swa_lo
        if header.end < floor:
            break
        floor = min(floor, lo)
        if lo > header.start:
            break
    return floor


def prefill(rt: Runtime, seq: int, tokens: list[int], should_stop: Callable[[], bool],
            on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Type-ahead: make ``seq`` hold ``tokens``, rolling back (``llama_memory_seq_rm``) from the first token
    that differs and decoding only the rest, without logits (``generate`` re-evaluates its last prompt token)."""
    if len(tokens) >= rt.n_ctx:
        raise RequestError(ErrorKind.CONTEXT_FULL, f"{len(tokens)} tokens do not fit the context of {rt.n_ctx}")
    held = rt.seqs.get(seq, [])
    common = common_prefix(held, tokens)
    if rt.vision is not None:  # never inside an image: it is read whole (hisho.engine.model.vision)
        common = rt.keep_upto(seq, tokens, common)
    elif common < len(held) or not rt.keeper.dense:
        common = rt.seq_rm(seq, common)  # where the memory cannot cut there: a checkpoint, or from the start
    rolled_back = len(held) - common
    start = time.perf_counter()
    complete = rt.decode_tokens(seq, tokens[common:], want_logits=False, should_stop=should_stop,
                                on_progress=on_progress)
    if complete:
        rt.keeper.checkpoint(seq)  # a turn boundary or a type-ahead state: a later edit restores it
    return {"held": len(rt.seqs.get(seq, [])), "decoded": len(tokens) - common, "rolled_back": rolled_back,
            "complete": complete, "seconds": time.perf_counter() - start}

