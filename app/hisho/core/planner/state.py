"""What a saved sequence state costs on disk, per memory type, and what resuming from it saves.

llama.cpp's per-sequence state (``llama_state_seq_get_data``) holds, per cache: full-attention layers one K and
V row per token; sliding-window layers only the cells still inside the window (older ones are masked out and
not written: at most ``n_swa``); recurrent layers one fixed state (conv + SSM / WKV rows), whatever the length.
A checkpoint (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``) is the part a cut cannot give back: the window and the
recurrent state. So a dense model's state grows with every token, a Gemma-3's grows only by its few global
layers plus a constant window, and a Mamba's does not grow at all. On disk the engine writes 512-token chunks
(``StateSize.chunked``): each carries its own window cells while the cache holds them; on a recurrent model only
the chunk that ends a save carries the recurrent state (the others leave it out, ``kvf.NO_STATE``). Decisions:
docs/planner.md "Saved state" and "Kept state".
"""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.kv.marks import COARSE_TOKENS, interval_tokens
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner.layout import Config, row_bytes, stream_cells, swa_cells
from hisho.core.units import MIB

CELL_META = 12  # bytes of metadata per saved attention cell (its position, sequence count, ...), measured
# Per state copy, beyond rows and cell metadata: llama.cpp's preamble and per-cache / per-layer headers (measured
# 3.3-3.5 KiB per chunk on the Gemma-3 tiny shape; tests/engine/test_saved_state_size.py bounds it by 4 KiB).
STATE_HEADERS = 4096

# What the engine keeps beside the context, mirrored from engine/model/prefix.py and engine/kv/kvstate.py (a test checks
# that they agree): partial-state checkpoints per sequence, the chunk size of a save, the save arena's steps
# and the largest arena kept for the next save.
CHECKPOINTS_PER_SEQ = 8
CHECKPOINT_BYTES_PER_SEQ = 256 * MIB
# Interval checkpoints: one per mark of a prompt's reading at most (core/kv/marks.py interval_tokens, the
# engine's rule too) and at most this many bytes of them, beside the turns' above.
INTERVAL_BYTES_PER_SEQ = 256 * MIB
CHUNK_TOKENS = 512
ARENA_ROUND = 4 * MIB
WARM_ARENA_MAX = 512 * MIB
IDENTITY_WINDOW = 16 * MIB  # core.models.identity.WINDOW
HEAP_RETAINS = 32 * MIB  # glibc's DEFAULT_MMAP_THRESHOLD_MAX (64-bit): freed blocks up to this stay in the heap
HEAP_TRIM = 2 * HEAP_RETAINS  # glibc's trim threshold follows the mmap threshold: a larger free heap top goes back
TOKEN_REF = 8  # a checkpoint's token list: one reference per token (the int objects are the sequence's own)


@dataclass(frozen=True)
class StateSize:
    """Bytes of one sequence's saved state: ``per_token`` for each token (full-attention layers),
    ``window_per_cell`` for each token still in the sliding window (at most ``window`` of them), and ``recurrent``
    once. A checkpoint at a boundary is the window part plus the recurrent part."""

    per_token: int
    window_per_cell: int
    window: int
    recurrent: int

    def saved(self, n_tokens: int) -> int:
        """Bytes on disk for a whole state of ``n_tokens`` tokens."""
        n = max(0, n_tokens)
        window = min(n, self.window)
        cells = (n if self.per_token else 0) + (window if self.window_per_cell else 0)
        return n * self.per_token + window * self.window_per_cell + (self.recurrent if n else 0) + cells * CELL_META

    def checkpoint(self, n_tokens: int) -> int:
        """Bytes of a partial checkpoint after ``n_tokens`` tokens: what a cut cannot restore (0 for dense)."""
        n = max(0, n_tokens)
        window = min(n, self.window)
        return window * (self.window_per_cell + CELL_META) + (self.recurrent if n else 0)

    def chunks(self, n_tokens: int, chunk_tokens: int = CHUNK_TOKENS, window_held: int | None = None) -> list[int]:
        """Bytes of each chunk the engine copies out for a save of ``n_tokens`` tokens in chunks of
        ``chunk_tokens``, every chunk new (``KVState.save``: each chunk through the scratch sequence). A chunk
        ``[s, e)`` holds its own full-attention rows and the window cells of its range that are inside the
        window of ``e - 1``: the chunk that ends the save those still in the window cache (its last
        ``window_held`` positions: ``memory.swa_cells``), the others those of the interval checkpoint taken at
        their end (engine/model/prefix.py: the prompt's reading kept one at every chunk end, the most it keeps). On a
        recurrent model each chunk holds one recurrent state for the same reason (a restore can end there)."""
        n = max(0, n_tokens)
        step = chunk_tokens if chunk_tokens > 0 else max(1, n)
        held_from = n - (self.window if window_held is None else window_held)
        every = self.interval_every(n, step)
        sizes = []
        for i, start in enumerate(range(0, n, step)):
            end = min(n, start + step)
            cells = end - start
            marked = end < n and (i + 1) % every == 0
            low = max(start, end - self.window, start if marked else held_from)
            window = max(0, end - low) if self.window_per_cell else 0
            sizes.append((cells * (self.per_token + CELL_META) if self.per_token else 0)
                         + window * (self.window_per_cell + CELL_META)
                         + (self.recurrent if marked or end == n else 0) + STATE_HEADERS)
        return sizes

    def interval_spacing(self, n_tokens: int, interval: int = COARSE_TOKENS) -> int:
        """Tokens between two kept interval checkpoints of a context of ``n_tokens`` read with marks every
        ``interval``: the engine's budget rule (PrefixKeeper.interval_spacing), the smallest power-of-two
        multiple of ``interval`` at which the context's fit ``INTERVAL_BYTES_PER_SEQ``; its cost rule can only
        space them wider."""
        n_max = max(1, INTERVAL_BYTES_PER_SEQ // max(1, self.checkpoint(n_tokens) + STATE_HEADERS))
        step = max(1, interval)
        return step * (1 << (max(1, -(-n_tokens // (n_max * step))) - 1).bit_length())

    def interval_every(self, n_tokens: int, chunk_tokens: int = CHUNK_TOKENS) -> int:
        """Every how many chunks of a save of ``n_tokens`` one ends at a kept interval checkpoint (marks every
        chunk or finer: ``interval_spacing``)."""
        if not self.window_per_cell and not self.recurrent:
            return max(1, n_tokens)  # dense: none
        return max(1, self.interval_spacing(n_tokens, max(1, chunk_tokens)) // max(1, chunk_tokens))

    def chunked(self, n_tokens: int, chunk_tokens: int = CHUNK_TOKENS, window_held: int | None = None) -> int:
        """Bytes a save of ``n_tokens`` tokens copies out (``chunks``: its attention rows, the window cells the
        cache still holds, the recurrent state once); also what its chunk files hold on disk, less their
        headers."""
        return sum(self.chunks(n_tokens, chunk_tokens, window_held))

    def to_dict(self) -> dict[str, int]:
        return {"per_token": self.per_token, "window_per_cell": self.window_per_cell, "window": self.window,
                "recurrent": self.recurrent, "checkpoint_full_window": self.checkpoint(self.window or 1),
                "chunk_file": self.chunked(CHUNK_TOKENS)}


def state_size(facts: ModelFacts, type_k: str = "f16", type_v: str = "f16") -> StateSize:
    full = swa = 0
    for il in range(facts.n_layer):
        heads = max(0, facts.n_head_kv[il]) if facts.attends(il) else 0
        per = row_bytes(type_k, facts.key_length * heads) + row_bytes(type_v, facts.value_length * heads)
        if facts.swa_layers[il]:
            swa += per
        else:
            full += per
    n_recurrent = sum(facts.recurrent_layers) if facts.recurrent_layers else 0
    return StateSize(per_token=full, window_per_cell=swa, window=facts.n_swa if swa else 0,
                     recurrent=n_recurrent * (facts.n_embd_r + facts.n_embd_s) * 4)


def seconds_saved(n_tokens: int, n_bytes: int, prefill_tok_s: float, restore_bytes_s: float) -> float:
    """Prefill avoided minus the restore: reading ``n_bytes`` instead of prefilling ``n_tokens``. ``n_bytes`` is
    what the chunk files hold (the sidebar reads their real sizes; a plan uses ``StateSize.chunked``): for a
    sliding-window model the global layers' rows plus the window cells of the last chunks, so it resumes
    relatively faster than a dense model of the same prefill speed; for a hybrid one its attention rows plus one
    recurrent state (55 MiB on Granite-4-H-1B, whatever the length), so a short conversation resumes relatively
    slower and a long one faster."""
    if prefill_tok_s <= 0 or restore_bytes_s <= 0:
        return 0.0
    return max(0.0, n_tokens / prefill_tok_s - n_bytes / restore_bytes_s)


@dataclass(frozen=True)
class Kept:
    """Bytes the engine holds beside the context (``memory.Breakdown.kept``), at their peak (``peak``): the
    checkpoints every sequence keeps (``kept_per_seq`` of them, ``sequences`` times: the turns' at
    ``per_checkpoint`` each, the last ``marks`` of them interval checkpoints of ``mark_bytes`` in all, each at its
    own size: a mark before the window is full holds fewer cells) and the one being taken before the oldest is
    dropped; the save ``arena`` of ``arenas`` sequences saving (0 when the load saves
    no KV); the largest chunk file a ``restore`` has mapped (one at a time); the model file's window hashed once
    for its identity (``identity``)."""

    per_checkpoint: int
    kept_per_seq: int
    sequences: int
    arena: int
    restore: int
    identity: int
    arenas: int = 1
    marks: int = 0
    mark_bytes: int = 0

    @property
    def per_seq(self) -> int:
        """Bytes of the checkpoints one sequence keeps."""
        return (self.kept_per_seq - self.marks) * self.per_checkpoint + self.mark_bytes

    @property
    def warm_arena(self) -> int:
        """The arena still held after its write: the writer keeps arenas up to ``WARM_ARENA_MAX`` each for the
        next save and lets larger ones go once written (engine/kv/chunkwriter.py ``ChunkWriter``)."""
        return self.arena if self.arena <= WARM_ARENA_MAX * max(1, self.arenas) else 0

    @property
    def retained(self) -> bool:
        """Whether a dropped checkpoint's memory stays in the process: glibc serves a block below its mmap
        threshold from the heap and keeps it when freed, and the threshold climbs to the largest block freed so
        far (up to 32 MiB: an arena outgrown, a repacked tensor's read buffer), so a long session reaches it."""
        return 0 < self.per_checkpoint <= HEAP_RETAINS

    @property
    def allocated(self) -> int:
        """The part that is allocated memory (checkpoints, arena), not mapped file pages: what ``committed`` adds."""
        kept = self.sequences * self.per_seq
        if self.retained:
            return kept + self.per_checkpoint + self.arena
        return max(kept + self.per_checkpoint + self.warm_arena, kept + self.arena)

    @property
    def peak(self) -> int:
        kept = self.sequences * self.per_seq
        if self.retained:
            # The heap keeps the slots of the most checkpoints ever held (one more than kept) through a save's
            # arena, the first save's identity hash and a restore: the restore drops its sequence's checkpoints
            # first, but glibc gives back only a free heap *top*, and a prompt's reading (its interval
            # checkpoints) and the other sequences' checkpoints leave live blocks above them (measured: the
            # window's and serve's restores on Gemma-3-270M came on top of every slot).
            slots = kept + self.per_checkpoint
            return max(slots + max(self.arena, self.identity), slots + self.warm_arena + self.restore)
        others = kept - self.per_seq
        return max(kept + self.per_checkpoint + self.warm_arena,  # a checkpoint taken beside a warm arena
                   kept + self.arena,                              # a save
                   kept + self.identity,                           # the first save of a model file hashes it
                   # a restore: its sequence's checkpoints given back, one chunk mapped at a time, each unmapped
                   # before the checkpoint at its end is taken
                   others + self.warm_arena + max(self.restore, self.per_checkpoint))


def checkpoint_sequences(cfg: Config) -> int:
    """Sequences that take checkpoints: every one but the scratch sequence a unified cache of two or more keeps for
    chunk copies (engine/kv/kvstate.py)."""
    if cfg.n_seq_max >= 2 and cfg.kv_unified:
        return cfg.n_seq_max - 1
    return max(1, cfg.n_seq_max)


def kept_bytes(facts: ModelFacts, cfg: Config) -> Kept:
    """What the engine's reuse and persistence hold beside the context for ``cfg`` (docs/planner.md "Kept
    state").

    Checkpoints (engine/model/prefix.py), sliding-window and recurrent models only: one holds the window part and the
    recurrent state of one sequence (``StateSize.checkpoint``: at most the whole window) and its token list; a
    sequence keeps at most ``CHECKPOINTS_PER_SEQ`` and at most ``CHECKPOINT_BYTES_PER_SEQ`` of them (never fewer
    than one), and a new one is taken before the oldest is dropped; beside them the interval checkpoints of a
    prompt's reading, at most one per mark (``interval_tokens``) of the context and ``INTERVAL_BYTES_PER_SEQ``. With KV saved (engine/kv/kvstate.py): a save of a
    whole sequence copies every chunk into one arena rounded up to 4 MiB, resident during the write and kept after
    it up to 512 MiB (larger ones are let go); a restore maps one chunk file at a time and unmaps it once loaded
    (the kernel's read-ahead of the next file is page cache, not the process's), then takes a checkpoint; the
    first save of a model file hashes it through one 16 MiB window (core/models/identity.py)."""
    size = state_size(facts, cfg.type_k, cfg.type_v)
    _streams, cells = stream_cells(cfg)
    seq_ctx = cells  # a sequence may fill its stream (the scratch sequence's copies only tag cells)
    held = swa_cells(facts, cells, cfg) if size.window_per_cell else 0
    n_seq = checkpoint_sequences(cfg)
    one = kept = 0
    at: list[int] = []
    if facts.memory != "dense":
        one = size.checkpoint(seq_ctx) + STATE_HEADERS + TOKEN_REF * seq_ctx
        kept = max(1, min(CHECKPOINTS_PER_SEQ, CHECKPOINT_BYTES_PER_SEQ // one))
        # the kept marks strictly inside the context (the one at its end is the turn's checkpoint taken there),
        # each holding the window cells and tokens it had then
        spacing = size.interval_spacing(seq_ctx, interval_tokens(facts.memory, cfg.n_gpu_layers))
        at = list(range(spacing, seq_ctx, spacing))
        kept += len(at)
    arena = restore = identity = 0
    if cfg.saves_kv:
        # Chunks go through the scratch sequence of a unified cache of two or more; without one (serve's
        # streams, a single sequence) a save is one chunk of the whole sequence, and a restore maps all of it
        # (measured: serve --parallel 2 on the 3B Q4_K_M shape read -4 % with 512-token chunks assumed).
        scratch = cfg.n_seq_max >= 2 and cfg.kv_unified
        chunks = size.chunks(seq_ctx, CHUNK_TOKENS if scratch else 0, held)
        arena = -(-sum(chunks) // ARENA_ROUND) * ARENA_ROUND * min(2, n_seq)
        restore = max(chunks, default=0)
        identity = min(IDENTITY_WINDOW, facts.weights_bytes)
    return Kept(per_checkpoint=one, kept_per_seq=kept, sequences=n_seq, arena=arena, restore=restore,
                identity=identity, arenas=min(2, n_seq), marks=len(at),
                mark_bytes=sum(size.checkpoint(m) + STATE_HEADERS + TOKEN_REF * m for m in at))
