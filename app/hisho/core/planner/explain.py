"""A plan's memory in rows a person understands: what each part is for, at this context and KV type.

``rows(plan)`` splits ``plan.need`` (the figure the fit is judged on: resident on Linux and macOS, committed on
Windows) into named parts that add up to it exactly, so the planner page's bar, its legend and ``hisho plan``
say the same numbers: the model's weights, the KV cache, the compute buffers (what they depend on: the
context, flash attention, the batch size), what the engine keeps for saving chats, llama.cpp's runtime, and
the load's own peak where that is higher than the full context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hisho.core.units import MIB


@dataclass(frozen=True)
class Row:
    key: str      # weights | kv | compute | kept | runtime | load
    label: str    # what it is, in words
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "bytes": self.bytes}


def tokens(n: int) -> str:
    """32768 -> "32K", 4000 -> "4,000"."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def rows(plan: Any) -> list[Row]:
    """The named parts of ``plan.need`` (a ``search.Plan``), largest first where it matters: they sum to it."""
    b, c = plan.breakdown, plan.config
    resident = plan.budget.metric != "committed"
    weights = b.weights + (b.weights_extra if resident else 0)
    compute = b.touched if resident else b.committed_bound - (b.committed - b.compute)
    kept = b.kept if resident else b.kept_committed
    runtime = b.output + b.runtime if resident else b.committed - b.weights - b.kv - b.compute - b.kept_committed
    out = [Row("weights", _weights_label(plan), weights), Row("kv", _kv_label(plan), b.kv),
           Row("compute", _compute_label(c), compute)]
    if kept:
        out.append(Row("kept", _kept_label(plan), kept))
    out.append(Row("runtime", "llama.cpp's runtime: vocabulary, output buffer, graph and work memory, "
                              "per-token bookkeeping", runtime))
    rest = plan.need - sum(r.bytes for r in out)
    if rest > 0:
        out.append(Row("load", "the model load's own peak (the vocabulary's metadata, held until the loader is "
                               "done) beyond the full context", rest))
    elif rest < 0:  # never shown as more than the need: trim the last rows
        for i in range(len(out) - 1, -1, -1):
            cut = min(out[i].bytes, -rest)
            out[i] = Row(out[i].key, out[i].label, out[i].bytes - cut)
            rest += cut
            if not rest:
                break
    return out


def _weights_label(plan: Any) -> str:
    b = plan.breakdown
    how = ("read into memory (repacked for this CPU)" if not b.mmap else
           "mapped from the file" + (", repacked parts held twice" if b.repacked else ""))
    return f"model weights ({plan.quant}, {how})"


def _kv_label(plan: Any) -> str:
    c = plan.config
    kv = c.type_k if c.type_k == c.type_v else f"{c.type_k}/{c.type_v}"
    seqs = ""
    if c.n_seq_max > 1:
        seqs = (f", shared by {c.n_seq_max} sequences" if c.kv_unified else
                f", {c.n_seq_max} streams of {tokens(max(1, c.n_ctx // c.n_seq_max))} (one per sequence)")
    memory = plan.facts.memory if plan.facts is not None else "dense"
    window = " (sliding-window layers hold only their window)" if memory in ("swa", "hybrid") else ""
    return f"KV cache for {tokens(c.n_ctx)} tokens, {kv}{seqs}{window}"


def _compute_label(c: Any) -> str:
    if c.flash_attn:
        return f"compute buffers for {tokens(c.n_ctx)} context with flash attention ({c.n_ubatch}-token batches)"
    return (f"compute buffers for {tokens(c.n_ctx)} context without flash attention (attention scores of "
            f"{c.n_ubatch}-token batches over the whole context)")


def _kept_label(plan: Any) -> str:
    from hisho.core.planner.state import kept_bytes

    if plan.facts is None:
        return "what the engine keeps for saving and resuming chats"
    k = kept_bytes(plan.facts, plan.config)
    bits = []
    if k.per_checkpoint:
        bits.append(f"{k.kept_per_seq} checkpoints per sequence for exact reuse")
    if k.arena:
        bits.append(f"a {k.arena / MIB:.0f} MiB buffer that saving a chat's KV copies it into")
    return "saving and resuming chats: " + (", ".join(bits) or "restore mappings")


def over_trained(plan: Any) -> tuple[str, str]:
    """(headline, detail) when one sequence's context in ``plan`` (a ``search.Plan``) is longer than the model
    was trained on, naming the file's rope scaling or its absence; ("", "") otherwise. The planner page and
    ``hisho plan`` both say it: such a context is allowed, as the user's choice, never silently."""
    facts, c = plan.facts, plan.config
    per_seq = c.n_ctx if c.kv_unified or c.n_seq_max <= 1 else c.n_ctx // c.n_seq_max
    if facts is None or not facts.context_length or per_seq <= facts.context_length:
        return "", ""
    rope = (f"its file sets {facts.rope_scaling} rope scaling" if facts.rope_scaling
            else "its file sets no rope scaling")
    return (f"⚠ Longer than the {facts.context_length:,} tokens this model was trained on",
            f"{rope}, so replies past that length may lose the thread or repeat themselves.")
