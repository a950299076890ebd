"""Which prefix of a sequence the context can keep and continue exactly: the one rule every reuse path goes through
(``Runtime.seq_rm``), and the checkpoints that make a shorter prefix possible where cutting is not.

Engine thread only. What llama.cpp does (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp,
llama-memory-recurrent.cpp, llama-memory-hybrid.cpp of the bundled build):

- **Dense attention**: every cell of every position is kept until removed, so any prefix can be kept.
- **Sliding window (iSWA)**: the window layers have a cache of about ``n_swa × n_seq_max + n_ubatch`` cells; a
  cell whose position is out of the window of its sequence's last position is overwritten when room is needed.
  A query at position p sees the keys at ``p - n_swa + 1 .. p``, so keeping a prefix of length p is exact only
  if those cells are still there: ``llama_memory_seq_pos_min`` (the window cache's lowest position) must be
  ``<= p - n_swa + 1``. ``seq_rm`` returns true either way; the check is ours.
- **Recurrent / hybrid** (Mamba, LFM2's short convolutions, Granite-4-H, ...): one state per sequence, at its
  last position. ``seq_rm`` from a position inside it returns false and changes nothing (a rollback needs
  ``n_rs_seq`` snapshots, off here); the hybrid's ``seq_pos_min`` is the recurrent state's position. Only the
  whole held prefix can be kept.

Where the rule says no, a **checkpoint** is restored: the partial state (``llama_state_seq_get_data_ext`` with
``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: the window cache, or the recurrent state; the full-attention cells stay
in the context) taken when the sequence held exactly ``n`` tokens, then the full cache is cut at ``n``. Taken
at the end of each prompt but its last token (``generate``: regenerate and edit-and-resend of the last message)
and after each ``prefill`` (the turn boundary the app appends, type-ahead), never for dense models. Without a
usable checkpoint the sequence is cleared and the prompt prefilled whole: slower, never wrong.

A window checkpoint is put in position order and loaded straight back (``_relay``): the live sequence then has
its window cells in the slots a later restore of that checkpoint gives them, so the reply that follows and a
regenerate round alike (docs/kv-format.md "Numerics").

**Interval checkpoints.** A prompt read with ``Runtime.decode_tokens`` stops at every multiple of the model's
mark spacing (``hisho.core.kv.marks.interval_tokens``: 128 tokens on a CPU load; it divides a save's chunk, so
chunk ends are marks) and a checkpoint is taken there
(``interval_checkpoint``): a request that parts from a long prompt anywhere restores the newest one at or before
the divergence and reads only the rest; a save puts each one into the chunk file that ends there
(``hisho.engine.kv.kvstate``), so the same holds after a restart. Every reading stops at the same absolute
positions, so a continuation from a restored one equals a fresh prefill, re-lay included. Which are *kept*
(``interval_spacing``) is the cost rule: one is worth keeping where re-reading the tokens since the one before
costs more than restoring it (``size / RESTORE_BYTES_PER_S`` against ``spacing / prefill speed``, the speed
measured on this prompt's slices), and the ones a whole context would need fit ``INTERVAL_BYTES_PER_SEQ``; the
spacing is the smallest power-of-two multiple of the marks' meeting both (a power of two, so kept ones still fall
on the chunk ends of a save). Keeping fewer changes no number, only how
much a divergence re-reads.
"""

from __future__ import annotations

import ctypes
import logging
import math
from dataclasses import dataclass
from typing import Any

import llama_cpp

from hisho.core.kv.marks import interval_tokens
from hisho.engine.model import cellorder

log = logging.getLogger("hisho.engine")

PARTIAL = int(getattr(llama_cpp, "LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY", 1))
CHECKPOINTS_PER_SEQ = 8          # the newest: the last turns, then the type-ahead states after them
CHECKPOINT_BYTES_PER_SEQ = 256 << 20
INTERVAL_BYTES_PER_SEQ = 256 << 20  # interval checkpoints kept per sequence, beside the turns' above
RESTORE_BYTES_PER_S = 1e9        # a partial state loaded back (from memory ~10 GB/s, a cold SSD ~1-2 GB/s): low end
PREFILL_GUESS_TOK_S = 250.0      # until a slice of this context was timed (docs/waits.md's guess)


@dataclass
class Checkpoint:
    tokens: list[int]              # what the sequence held when it was taken (its first ``n`` tokens)
    data: ctypes.Array[ctypes.c_uint8]
    turn: bool = False             # a prompt's end or the turn boundary after a reply: evicted after type-ahead's
    interval: bool = False         # taken at an interval mark while a prompt was read (PrefixKeeper.marks)

    @property
    def n(self) -> int:
        return len(self.tokens)


class PrefixKeeper:
    """The reuse rule of one context's memory, and its checkpoints per sequence."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        model = rt.model
        self.n_swa = int(llama_cpp.llama_model_n_swa(model))
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(model)) or bool(
            llama_cpp.llama_model_is_hybrid(model))
        self.dense = not self.n_swa and not self.recurrent
        # Where every reading stops (0: dense, none): a fixed function of the model and load (exactness).
        self.interval = interval_tokens("dense" if self.dense else "other", int(rt.params.n_gpu_layers))
        self.checkpoints: dict[int, list[Checkpoint]] = {}
        # After a restore from several chunk files the window cells can have holes below the last window (each
        # file holds the window of its own end): positions below the floor are not trusted for a cut.
        self.floor: dict[int, int] = {}
        self._after_reply: dict[int, bool] = {}
        self.slices: dict[int, list[tuple[int, int]]] = {}  # note_slice: dense sequences' multi-token slices
        self._empty_state: ctypes.Array[ctypes.c_uint8] | None = None  # drop_state's: the state of no cells
        self.prefill_tok_s = PREFILL_GUESS_TOK_S  # note_speed: the latest multi-token slice's speed
        self._unordered_logged = False

    def reset(self) -> None:
        self.checkpoints.clear()
        self.floor.clear()
        self._after_reply.clear()
        self.slices.clear()

    @property
    def kind(self) -> str:
        if self.recurrent:
            return "hybrid" if bool(llama_cpp.llama_model_is_hybrid(self.rt.model)) else "recurrent"
        return "swa" if self.n_swa else "dense"

    # ----- the rule -------------------------------------------------------------------------------

    def why_not(self, seq: int, p: int) -> str | None:
        """None if ``seq`` can keep its first ``p`` tokens and continue exactly; else the reason."""
        if self.dense or p <= 0:
            return None
        held = len(self.rt.seqs.get(seq, []))
        mem = self.rt.memory
        pos_max = int(llama_cpp.llama_memory_seq_pos_max(mem, seq))
        pos_min = int(llama_cpp.llama_memory_seq_pos_min(mem, seq))
        if pos_max + 1 != held:
            return f"the cache holds positions up to {pos_max}, the sequence {held} tokens"
        if self.recurrent:
            if p < held:
                return f"a recurrent state at position {held - 1} cannot be cut back to {p}"
            if pos_min != held - 1:
                return f"the recurrent state is at position {pos_min}, not {held - 1}"
        # One cell of margin below the window: a query at p sees p - n_swa + 1 .. p.
        low = max(pos_min, self.floor.get(seq, 0))
        if self.n_swa and low > max(0, p - self.n_swa):
            return (f"the sliding-window layers hold positions from {low} on; continuing at {p} needs "
                    f"{max(0, p - self.n_swa)}")
        return None

    def keep(self, seq: int, p: int) -> int:
        """Make ``seq`` hold only its first ``p`` tokens if that is exact, else the longest exact prefix below
        (a checkpoint), else nothing. Returns how many tokens it holds now (``Runtime.seqs`` follows)."""
        rt = self.rt
        held = rt.seqs.get(seq, [])
        p = max(0, min(p, len(held)))
        if p == 0:
            # Always a real clear: batch decodes (summaries' map step) fill sequences that ``Runtime.seqs`` does
            # not track, and a "nothing held, nothing to cut" shortcut left their cells in place.
            self.clear(seq)
            return 0
        p = self._slice_start(seq, p, held)
        why = self.why_not(seq, p)
        if why is None:
            if p == len(held) or self._cut(seq, p):
                self._drop_above(seq, p)
                rt.seqs[seq] = held[:p]
                return p
            why = "llama.cpp refused to cut the sequence there"
        kept = self._restore_checkpoint(seq, p, held)
        log.info("sequence %d: keeping %d of %d tokens is not exact (%s); %s", seq, p, len(held), why,
                 f"restored the checkpoint at {kept}" if kept else "prefilling from the start")
        return kept

    def note_slice(self, seq: int, start: int, end: int) -> None:
        """``seq``'s positions ``start..end`` were just decoded in one llama_decode (a slice of a reply's prompt;
        type-ahead's pieces are not noted: a Send after them decodes only the last token, and a regenerate of
        that Send does the same)."""
        if self.dense and end - start > 1:
            self.slices.setdefault(seq, []).append((start, end))

    def _slice_start(self, seq: int, p: int, held: list[int]) -> int:
        """A dense prefix is kept whole or back to the start of the multi-token slice it ends in: the
        slice is then decoded again in one piece, as it was, so its cells round as they did (a regenerate keeps
        all but the prompt's last token: the user's message is read again, not its last token alone;
        docs/kv-format.md "Numerics"). Non-dense models split every prompt before its last token instead."""
        for start, end in reversed(self.slices.get(seq, [])):
            if start < p < end <= len(held):
                return start
            if end <= p:
                break
        return p

    def _cut(self, seq: int, p: int) -> bool:
        return bool(llama_cpp.llama_memory_seq_rm(self.rt.memory, seq, p, -1))

    def clear(self, seq: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.rt.memory, seq, -1, -1)
        self.rt.seqs[seq] = []
        self.checkpoints.pop(seq, None)
        self.floor.pop(seq, None)
        self.slices.pop(seq, None)

    def _drop_above(self, seq: int, p: int) -> None:
        if seq in self.slices:  # slices no longer all in the cells
            self.slices[seq] = [(a, b) for a, b in self.slices[seq] if b <= p]
        if p <= 0:
            self.checkpoints.pop(seq, None)
            self.floor.pop(seq, None)
        elif seq in self.checkpoints:
            self.checkpoints[seq] = [c for c in self.checkpoints[seq] if c.n <= p]

    # ----- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, seq: int, *, prompt: bool = False) -> bool:
        """Keep the partial state of ``seq`` as it is now (no-op for dense models, or when one exists).
        ``prompt``: taken before a reply; the next one (the boundary the app appends after the reply) is a
        turn's too. Type-ahead states go first when there are too many."""
        if self.dense:
            return False
        turn = prompt or self._after_reply.pop(seq, False)
        if prompt:
            self._after_reply[seq] = True
        held = self.rt.seqs.get(seq, [])
        same = next((c for c in self.checkpoints.get(seq, []) if c.n == len(held) and c.tokens == held), None)
        if same is not None and same.interval:
            same.interval, same.turn = False, turn  # a mark that is also a turn's: kept by the turns' caps
            return True
        ck = self._take(seq)
        if ck is None:
            return False
        ck.turn = turn
        mine = self.checkpoints[seq]
        while True:
            turns = [i for i, c in enumerate(mine[:-1]) if not c.interval]
            kept = [c for c in mine if not c.interval]
            if not turns or (len(kept) <= CHECKPOINTS_PER_SEQ
                             and sum(len(c.data) for c in kept) <= CHECKPOINT_BYTES_PER_SEQ):
                return True
            typed = [i for i in turns if not mine[i].turn]
            mine.pop(typed[0] if typed else turns[0])  # the oldest type-ahead state, else the oldest turn

    def marks(self, start: int, end: int) -> list[int]:
        """The interval marks strictly between positions ``start`` and ``end`` (none for dense models)."""
        step = self.interval
        if self.dense or step <= 0:
            return []
        first = (start // step + 1) * step
        return list(range(first, end, step))

    def interval_checkpoint(self, seq: int) -> bool:
        """A prompt's reading reached a mark: take a checkpoint there (taken at every mark, so every reading
        re-lays the window at the same positions), then keep only those ``interval_spacing`` says are worth it."""
        if self.dense:
            return False
        held = self.rt.seqs.get(seq, [])
        mine = self.checkpoints.get(seq, [])
        if any(c.n == len(held) and c.tokens == held for c in mine):
            return True  # a turn's already (kept by the turns' caps)
        ck = self._take(seq)
        if ck is None:
            return False
        ck.interval = True
        step = self.interval_spacing(len(ck.data))
        kept = [c for c in self.checkpoints[seq] if not c.interval or c.n % step == 0]
        while sum(len(c.data) for c in kept if c.interval) > INTERVAL_BYTES_PER_SEQ:
            kept.remove(next(c for c in kept if c.interval))  # the oldest: a later one re-reads less
        self.checkpoints[seq] = kept
        return True

    def interval_spacing(self, size: int) -> int:
        """How far apart kept interval checkpoints of ``size`` bytes are: the smallest power-of-two multiple of
        the marks' spacing (1) whose re-reading at the measured prefill speed takes longer than restoring one
        (``size / RESTORE_BYTES_PER_S``), and (2) at which a sequence filling its context keeps at most
        ``INTERVAL_BYTES_PER_SEQ`` of them. A power of two: the marks divide a save's chunk, so a kept one still
        falls on chunk ends (the chunk file carries it) wherever it is no further apart than a chunk."""
        step = max(1, self.interval)
        restore_s = size / RESTORE_BYTES_PER_S
        reread = max(1, math.ceil(restore_s * self.prefill_tok_s / step))
        n_max = max(1, INTERVAL_BYTES_PER_SEQ // max(1, size))
        fit = max(1, math.ceil(int(self.rt.n_ctx_seq) / (n_max * step)))
        return step * (1 << (max(reread, fit) - 1).bit_length())

    def note_speed(self, n_tokens: int, seconds: float) -> None:
        """A prompt slice of ``n_tokens`` took ``seconds`` (``Runtime.decode_tokens``): the rule's prefill speed."""
        if n_tokens >= 64 and seconds > 0:
            self.prefill_tok_s = n_tokens / seconds

    def interval_at(self, seq: int, n: int) -> Checkpoint | None:
        """A checkpoint of ``seq`` taken when it held its first ``n`` tokens (for a save's chunk ending there)."""
        held = self.rt.seqs.get(seq, [])
        return next((c for c in self.checkpoints.get(seq, []) if c.n == n and held[:n] == c.tokens), None)

    def load_partial(self, seq: int, ck: Checkpoint) -> bool:
        """Load ``ck``'s partial state into ``seq`` (a save's scratch sequence); False where llama.cpp refused."""
        return int(llama_cpp.llama_state_seq_set_data_ext(self.rt.ctx, ck.data, len(ck.data), seq, PARTIAL)) > 0

    def _take(self, seq: int) -> Checkpoint | None:
        """The partial state of ``seq`` now, appended to its checkpoints (None: not exact here, or one exists)."""
        held = self.rt.seqs.get(seq, [])
        if not held or self.why_not(seq, len(held)) is not None:
            return None
        mine = self.checkpoints.setdefault(seq, [])
        if any(c.n == len(held) and c.tokens == held for c in mine):
            return None
        ctx = self.rt.ctx
        size = int(llama_cpp.llama_state_seq_get_size_ext(ctx, seq, PARTIAL))
        data = (ctypes.c_uint8 * max(1, size))()
        got = int(llama_cpp.llama_state_seq_get_data_ext(ctx, data, size, seq, PARTIAL))
        if got != size:
            log.warning("checkpoint of sequence %d: llama.cpp wrote %d of %d bytes", seq, got, size)
            return None
        if self.n_swa:
            self._in_position_order(data)
            self._relay(seq, data)
        ck = Checkpoint(list(held), data)
        mine[:] = [c for c in mine if c.n != ck.n] + [ck]  # one of other tokens at this length is stale
        return ck

    def _in_position_order(self, data: ctypes.Array[ctypes.c_uint8]) -> None:
        if cellorder.by_position(data) is None and not self._unordered_logged:
            self._unordered_logged = True
            log.warning("window checkpoints keep llama.cpp's slot order: this build's state format is not the one "
                        "hisho.engine.model.cellorder reads (a resume from disk may round differently)")

    def _relay(self, seq: int, data: ctypes.Array[ctypes.c_uint8]) -> None:
        """Load the checkpoint just taken back into ``seq``: its window cells move to the slots a later restore
        of that checkpoint puts them in. The window cache is a ring, and attention sums over its slots in slot
        order: a continuation from the ring as it is and one from a restore would round differently and, on a
        near tie, part ways hundreds of tokens on. Re-laid, the reply that follows the prompt and its regenerate
        start from the same slots, bit for bit (docs/kv-format.md "Numerics")."""
        if int(llama_cpp.llama_state_seq_set_data_ext(self.rt.ctx, data, len(data), seq, PARTIAL)) == 0:
            # llama.cpp dropped the window cells: nothing may continue from this sequence.
            self.clear(seq)
            raise RuntimeError(f"sequence {seq}: its window cache did not load back; it was cleared")

    def note_empty(self, seq: int) -> None:
        """Keep the partial state of ``seq``, which holds nothing now (once; ``drop_state`` loads it)."""
        if not self.recurrent or self._empty_state is not None:
            return
        ctx = self.rt.ctx
        size = int(llama_cpp.llama_state_seq_get_size_ext(ctx, seq, PARTIAL))
        data = (ctypes.c_uint8 * max(1, size))()
        if int(llama_cpp.llama_state_seq_get_data_ext(ctx, data, size, seq, PARTIAL)) == size:
            self._empty_state = data

    def drop_state(self, seq: int) -> bool:
        """Take the recurrent state out of ``seq`` and leave its attention cells (a KV save's copy of a chunk that
        ends no restore point: the state is written once, with the chunk at the end of the save). Loads the
        state ``note_empty`` kept: llama.cpp's recurrent ``state_read`` of zero cells clears the sequence's state,
        and ``PARTIAL_ONLY`` leaves a hybrid's attention cells alone. (No ``seq_rm`` does it: a recurrent cache
        drops a state only together with every cell from position 0.) False where nothing was dropped."""
        data = self._empty_state
        if not self.recurrent or data is None:
            return False
        return int(llama_cpp.llama_state_seq_set_data_ext(self.rt.ctx, data, len(data), seq, PARTIAL)) > 0

    def checkpoint_bytes(self) -> int:
        return sum(len(c.data) for mine in self.checkpoints.values() for c in mine)

    def _restore_checkpoint(self, seq: int, p: int, held: list[int]) -> int:
        """Restore the newest checkpoint of at most ``p`` tokens that ``seq`` still starts with; clear ``seq``
        when there is none (or it does not load). Returns the tokens held."""
        rt = self.rt
        usable = [c for c in self.checkpoints.get(seq, []) if c.n <= p and held[:c.n] == c.tokens]
        for ck in sorted(usable, key=lambda c: c.n, reverse=True):
            n = int(llama_cpp.llama_state_seq_set_data_ext(rt.ctx, ck.data, len(ck.data), seq, PARTIAL))
            if n == 0:
                log.warning("checkpoint at %d of sequence %d did not load", ck.n, seq)
                break  # llama.cpp cleared the partial state: the sequence is no longer whole
            if not self._cut(seq, ck.n):
                break
            rt.seqs[seq] = held[:ck.n]
            self.floor.pop(seq, None)  # the window cells are the checkpoint's now: one run up to its end
            if self.why_not(seq, ck.n) is not None:
                break
            self._drop_above(seq, ck.n)
            return ck.n
        self.clear(seq)
        return 0
