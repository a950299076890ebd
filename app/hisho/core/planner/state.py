"""What a saved sequence state costs on disk, per memory type, and what resuming from it saves.

llama.cpp's per-sequence state (``llama_state_seq_get_data``) holds, per cache: full-attention layers one K and
V row per token; sliding-window layers only the cells still inside the window (older ones are masked out and
not written: at most ``n_swa``); recurrent layers one fixed state (conv + SSM / WKV rows), whatever the length.
A checkpoint (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``) is the part a cut cannot give back: the window and the
recurrent state. So a dense model's state grows with every token, a Gemma-3's grows only by its few global
layers plus a constant window, and a Mamba's does not grow at all. Decisions: docs/planner.md "Saved state".
"""

from __future__ import annotations

from dataclasses import dataclass

from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner.memory import row_bytes

CELL_META = 12  # bytes of metadata per saved attention cell (its position, sequence count, ...), measured


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

    def to_dict(self) -> dict[str, int]:
        return {"per_token": self.per_token, "window_per_cell": self.window_per_cell, "window": self.window,
                "recurrent": self.recurrent, "checkpoint_full_window": self.checkpoint(self.window or 1)}


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
    """Prefill avoided minus the restore: reading ``n_bytes`` instead of prefilling ``n_tokens``. For a sliding-
    window or recurrent model ``n_bytes`` is the window / recurrent part plus the global layers' rows (``StateSize
    .saved``), not n_tokens x a full KV row, so it resumes relatively faster than a dense model of the same
    prefill speed."""
    if prefill_tok_s <= 0 or restore_bytes_s <= 0:
        return 0.0
    return max(0.0, n_tokens / prefill_tok_s - n_bytes / restore_bytes_s)
