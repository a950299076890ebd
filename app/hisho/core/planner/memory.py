"""The memory model: bytes a configuration needs, split the way llama.cpp allocates them.

Two totals (docs/planner.md, "committed vs resident"):
- ``committed``: every allocation: weights (the mapped model buffer), KV, compute buffer, output buffer, and our
  engine's own arrays (the llama_batch). This is what llama.cpp reports and what Windows charges to commit.
- ``resident``: the peak the OS shows once the context is full: weights (mapped pages, all touched by a
  decode), KV (llama.cpp clears it at creation, so all of it), the part of the compute buffer a decode with one
  logit row touches, the output buffer, and the process overhead of a load (vocabulary, tensor metadata, graph
  structures, library code, the CPU backend's work buffer).

With a ``Calibration`` (llama.cpp's own dry run for this model, see calibrate.py) compute, output and overhead
are llama.cpp's figures; without one they come from formulas and the plan says "estimate".
Our engine uses the low-level API: there is no llama-cpp-python ``Llama`` logits array (n_batch x n_vocab x 4 B)
to count; its only arrays are one llama_batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner.layout import (
    KV_BLOCK as KV_BLOCK,  # re-exported: the planner's callers import them here
)
from hisho.core.planner.layout import Config as Config
from hisho.core.planner.layout import row_bytes as row_bytes
from hisho.core.planner.layout import stream_cells as stream_cells
from hisho.core.planner.layout import swa_cells as swa_cells
from hisho.core.planner.state import kept_bytes
from hisho.core.units import CELL_PAD as CELL_PAD  # one home for the padding (hisho.core.units); re-exported
from hisho.core.units import MIB
from hisho.core.units import padded_cells as padded_cells

# What only a real decode touches beyond the dry run's figures (CPU kernels' code pages, thread and work
# memory): measured with hisho bench plan on the default model, 0.7-2.2 MiB over 512..8192 tokens; the largest,
# rounded up. (3 MiB erred further towards over: harmless on a large model, but the tiny Gemma-3 shape, 34 MiB
# in all, read +5.0 to +5.1 % with it, on the rule's edge.)
DECODE_OVERHEAD = 9 * MIB // 4
# Host memory per cell of context a long conversation fills, beyond the KV rows: llama.cpp's per-cell bookkeeping
# (each cache's position map) and the engine's token lists. Measured by the slope of bench plan's peak over n_ctx:
# ~265 B per token on the GPT-OSS tiny shape (2048..32768), ~170 B on the bundled model; without it the GPT-OSS
# tiny shape at 32768 tokens read -7.9 % (7 MiB under an 83 MiB plan).
HOST_PER_CELL = 256


@dataclass
class Breakdown:
    """Bytes per part. ``gpu`` is the part of committed that lives on the GPU device (0 on CPU-only)."""

    weights: int
    kv: int
    compute: int
    output: int
    runtime: int
    committed: int
    resident: int
    gpu: int = 0
    committed_bound: int = 0  # committed with the compute buffer made non-decreasing in n_ctx (fit decisions)
    estimate: bool = False
    repacked: int = 0         # bytes llama.cpp copies into its CPU_REPACK buffer (part of ``weights``' load)
    mmap: bool = True         # whether the engine maps the file for this load
    kept: int = 0             # what the engine holds beside the context: checkpoints, save arena (state.Kept)
    kept_committed: int = 0   # the allocated part of ``kept`` (in ``committed``; mapped file pages are not)
    resident_bare: int = 0    # ``resident`` without ``kept``: a context filled once, nothing reused or saved
    touched: int = 0          # the part of ``compute`` a decode touches (what ``resident`` counts of it)
    weights_extra: int = 0    # weights held a second time in ``resident`` (mapped pages of repacked tensors)
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.output + self.runtime + self.kept

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total"] = self.total
        return d


_PER_CELL: dict[tuple[Any, ...], tuple[tuple[int, int], ...]] = {}


def _suffix_per_cell(facts: ModelFacts, type_k: str, type_v: str) -> tuple[tuple[int, int], ...]:
    """For each layer index i: (bytes per cell of full layers i.., of sliding-window layers i..). Layers without a
    KV cache (a hybrid model's recurrent layers) count nothing. Cached: the search asks for thousands of
    configurations of the same model."""
    key = (facts.n_head_kv, facts.swa_layers, facts.attention_layers, facts.key_length, facts.value_length,
           type_k, type_v)
    hit = _PER_CELL.get(key)
    if hit is not None:
        return hit
    rows = [(0, 0)]
    for il in reversed(range(facts.n_layer)):
        heads = max(0, facts.n_head_kv[il]) if facts.attends(il) else 0
        per = row_bytes(type_k, facts.key_length * heads) + row_bytes(type_v, facts.value_length * heads)
        full, swa = rows[-1]
        rows.append((full, swa + per) if facts.swa_layers[il] else (full + per, swa))
    out = tuple(reversed(rows))
    if len(_PER_CELL) > 256:
        _PER_CELL.clear()
    _PER_CELL[key] = out
    return out


def kv_bytes(facts: ModelFacts, cfg: Config, first_layer: int = 0) -> int:
    """Attention KV bytes of layers ``first_layer``.. (0: all of them). Layers with no KV heads hold nothing."""
    streams, cells = stream_cells(cfg)
    full, swa = _suffix_per_cell(facts, cfg.type_k, cfg.type_v)[min(first_layer, facts.n_layer)]
    return streams * (cells * full + (swa_cells(facts, cells, cfg) * swa if swa else 0))


def recurrent_bytes(facts: ModelFacts, cfg: Config, first_layer: int = 0) -> int:
    """Recurrent state bytes of layers ``first_layer``..: per recurrent layer one f32 r row and one s row for each
    of max(1, n_seq_max) cells (llama-memory-recurrent.cpp); independent of the context length."""
    if not facts.recurrent_layers:
        return 0
    n = sum(1 for il in range(first_layer, facts.n_layer) if facts.recurrent_layers[il])
    return n * (facts.n_embd_r + facts.n_embd_s) * 4 * max(1, cfg.n_seq_max)


def memory_bytes(facts: ModelFacts, cfg: Config, first_layer: int = 0) -> int:
    """What the context's memory holds for layers ``first_layer``..: attention KV plus recurrent state."""
    return kv_bytes(facts, cfg, first_layer) + recurrent_bytes(facts, cfg, first_layer)


def gpu_layers(facts: ModelFacts, n_gpu_layers: int) -> range:
    """The repeating layers on the GPU. llama.cpp counts the output layer first (llama-model.cpp:
    ``i_gpu_start = n_layer + 1 - n_gpu_layers``): n layers are the output layer and the last n - 1 repeating
    layers, and n_layer + 1 is all of them."""
    n = max(0, min(n_gpu_layers - 1, facts.n_layer))
    return range(facts.n_layer - n, facts.n_layer)


def weights_split(facts: ModelFacts, n_gpu_layers: int) -> tuple[int, int]:
    """(bytes in RAM, bytes on the GPU). token_embd always stays in RAM (llama.cpp's input layer); a model with
    tied embeddings (no ``output`` tensor) gets a copy of it on the GPU as its output layer, so the two can add up
    to more than the file's weights (measured on Vulkan with the default model)."""
    if n_gpu_layers <= 0:
        return facts.weights_bytes, 0
    layers = sum(facts.layer_bytes(il) for il in gpu_layers(facts, n_gpu_layers))
    output = sum(v for k, v in facts.tensor_bytes.items() if k.startswith("output"))
    tied = 0 if "output" in facts.tensor_bytes else facts.tensor_bytes.get("token_embd", 0)
    return facts.weights_bytes - layers - output, layers + output + tied


@dataclass(frozen=True)
class Calibration:
    """llama.cpp's dry-run figures for one model + library (see calibrate.py). ``points`` hold compute,
    touched and output bytes per (flash_attn, type_k, type_v) at several n_ctx, for one n_ubatch."""

    library: str
    n_ubatch: int
    model_overhead: int          # process growth of a no_alloc model load (anon + file pages)
    context_overhead: int        # process growth of creating the first context
    points: dict[str, list[tuple[int, int, int, int]]]  # key -> sorted [(n_ctx, compute, touched, output)]
    repacked: int = -1           # the dry run's CPU_REPACK model buffer (-1: not known, an older calibration)
    cpu_features: tuple[str, ...] = ()  # ggml's CPU features in the dry run's process
    model_peak: int = -1         # process peak growth during the no_alloc load (-1: not known)
    # key -> sorted [(n_ctx, bytes)]: the part of ``points``' compute that a GPU device reserves with no layer
    # offloaded (a GPU build's dry run; empty on a CPU build or an older calibration)
    device_points: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @staticmethod
    def key(flash_attn: bool, type_k: str, type_v: str) -> str:
        return f"{'fa' if flash_attn else 'nofa'}:{type_k}:{type_v}"

    def lookup(self, cfg: Config) -> tuple[int, int, int, int] | None:
        """(compute, compute bound, touched, output) at cfg.n_ctx, interpolated linearly between probed sizes.
        llama.cpp's compute buffer is not monotone in n_ctx (its allocator packs differently: 102.5 MiB at
        2048 but 98.3 MiB at 8192 on the default model), so fit decisions use a non-decreasing bound; touched
        is non-decreasing too (a longer context never touches less)."""
        pts = self.points.get(self.key(cfg.flash_attn, cfg.type_k, cfg.type_v))
        if not pts or cfg.n_ubatch != self.n_ubatch:
            return None
        n = padded_cells(cfg.n_ctx)
        touched_env, compute_env = _envelope([p[2] for p in pts]), _envelope([p[1] for p in pts])
        for i, p in enumerate(pts):
            if p[0] == n:
                return p[1], compute_env[i], touched_env[i], p[3]
        lo, hi = _bracket(pts, n)
        t = (n - pts[lo][0]) / (pts[hi][0] - pts[lo][0]) if pts[hi][0] != pts[lo][0] else 0.0

        def interp(vals: list[int]) -> int:
            return max(0, round(vals[lo] + t * (vals[hi] - vals[lo])))

        return (interp([p[1] for p in pts]), max(interp(compute_env), compute_env[lo] if t > 0 else 0),
                max(interp(touched_env), touched_env[lo] if t > 0 else 0), pts[hi][3])

    def device_lookup(self, cfg: Config) -> int | None:
        """The device's compute buffer at cfg.n_ctx, or None: the figure at the first probed size at or above
        it, on a non-decreasing envelope (never less than at a shorter context)."""
        pts = self.device_points.get(self.key(cfg.flash_attn, cfg.type_k, cfg.type_v))
        if not pts or cfg.n_ubatch != self.n_ubatch:
            return None
        n = padded_cells(cfg.n_ctx)
        env = _envelope([b for _, b in pts])
        return next((e for (at, _), e in zip(pts, env, strict=True) if n <= at), env[-1])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        points = {key: [_point(row) for row in rows] for key, rows in data["points"].items()}
        device = {key: [(int(n), int(b)) for n, b in rows] for key, rows in data.get("device_points", {}).items()}
        return cls(library=str(data["library"]), n_ubatch=int(data["n_ubatch"]),
                   model_overhead=int(data["model_overhead"]), context_overhead=int(data["context_overhead"]),
                   points=points, repacked=int(data.get("repacked", -1)),
                   cpu_features=tuple(str(f) for f in data.get("cpu_features", ())),
                   model_peak=int(data.get("model_peak", -1)), device_points=device)


def _point(row: list[Any]) -> tuple[int, int, int, int]:
    """One stored calibration point: (n_ctx, compute, touched, output); a row of another length is refused."""
    n_ctx, compute, touched, output = (int(x) for x in row)
    return n_ctx, compute, touched, output


def _envelope(vals: list[int]) -> list[int]:
    out, best = [], 0
    for v in vals:
        best = max(best, v)
        out.append(best)
    return out


def _bracket(pts: list[tuple[int, int, int, int]], n: int) -> tuple[int, int]:
    if n <= pts[0][0] or len(pts) == 1:
        return 0, min(1, len(pts) - 1)
    for i in range(1, len(pts)):
        if n <= pts[i][0]:
            return i - 1, i
    return len(pts) - 2, len(pts) - 1  # beyond the last probe: extrapolate from the last two


def formula_compute(facts: ModelFacts, cfg: Config) -> tuple[int, int, int]:
    """Uncalibrated (compute, touched, output). The compute buffer holds the largest live set of the graph:
    either the logits of a full ubatch or the attention scores (flash attention off) plus the FFN working set.
    Shaped after llama.cpp's figures for the default model; plans built on it say "estimate"."""
    ub = cfg.n_ubatch
    cells = padded_cells(cfg.n_ctx)
    n_head = max(facts.n_head) if facts.n_head else 1
    ffn = ub * 4 * (3 * facts.n_ff + 4 * facts.n_embd)
    if cfg.flash_attn:
        attn = cells * ub * 2  # the f16 KQ mask
    else:
        attn = cells * ub * n_head * 4 + cells * ub * 4  # KQ scores (f32) and the mask
    logits = ub * facts.vocab_size * 4
    touched = ffn + attn
    output = (facts.vocab_size + facts.n_embd) * 4 * cfg.n_seq_max
    return max(logits + facts.n_embd * ub * 4, touched), touched, output


def formula_overhead(facts: ModelFacts) -> int:
    # Vocabulary (token text, scores, piece cache) dominates the load's own memory: ~360 B per token on the
    # default model, plus tensor metadata and graph structures.
    return facts.vocab_size * 360 + 4 * MIB


# The load's transient: llama.cpp holds the GGUF metadata (each token's text, score and type) until the loader is
# done, beside the vocabulary it builds from it. Measured on a 262K-token vocabulary (Gemma-3 shape): a real load
# peaks 15.3 MiB (~61 B per token) over what it keeps; the no_alloc dry run shows only about half of that.
LOAD_TRANSIENT_PER_TOKEN = 64


def load_peak(facts: ModelFacts, calib: Calibration | None) -> int:
    """The process's growth at its peak during the model load, before any context: what the load keeps plus its
    transient (at least the per-token figure; more where the dry run's own peak says so)."""
    kept = calib.model_overhead if calib is not None else formula_overhead(facts)
    transient = facts.vocab_size * LOAD_TRANSIENT_PER_TOKEN
    if calib is not None and calib.model_peak >= 0:
        transient = max(transient, calib.model_peak - calib.model_overhead)
    return kept + transient


def batch_bytes(cfg: Config) -> int:
    cap = max(cfg.n_batch, cfg.n_seq_max)
    return cap * (4 + 4 + 4 + 1 + 8) + (cap + 1) * 8 + cap * 4 * cfg.n_seq_max


def weights_held(facts: ModelFacts, cfg: Config, calib: Calibration | None,
                 cpu: frozenset[str] | None) -> tuple[int, int, int, bool, list[str]]:
    """(weights committed, extra resident, repacked bytes, mmap, notes) for a load on a CPU with ``cpu``
    features (repack.py). Repacked weights live in an allocated buffer; with mmap the file's pages read to repack
    them stay mapped too (held twice), which is why the engine turns mmap off for such models. A tied embedding
    whose output copy is repacked is held twice either way (that copy is a second tensor)."""
    from hisho.core.planner.repack import repack_plan, use_mmap

    notes: list[str] = []
    if cpu is None and calib is not None and calib.cpu_features:
        cpu = frozenset(calib.cpu_features)
    moved, dup, largest = repack_plan(facts, cpu or ())
    if calib is not None and calib.repacked >= 0:
        dup = min(dup, calib.repacked)  # llama.cpp's own figure for the buffer; the rule only splits it
        moved = calib.repacked - dup
    elif cpu is None:
        notes.append("weight repacking not known (no CPU features probed): weights priced as mapped once")
    repacked = moved + dup
    mmap = cfg.use_mmap if cfg.use_mmap is not None else use_mmap(repacked)
    if repacked:
        twice = f"; with mmap they would be held twice (+{moved / MIB:.0f} MiB)" if not mmap else \
            f"; mmap is on, so the file pages read to repack them stay mapped too (+{moved / MIB:.0f} MiB)"
        notes.append(f"llama.cpp repacks {repacked / MIB:.0f} MiB of weights for this CPU (CPU_REPACK buffer); "
                     f"the engine loads {'with' if mmap else 'without'} mmap{twice}")
    if dup:
        notes.append(f"the tied embedding's output copy is repacked: +{dup / MIB:.0f} MiB")
    # Reading without mmap leaves about one largest repacked tensor's read buffer in the heap (repack.py).
    extra = moved if mmap else (largest if repacked else 0)
    return facts.weights_bytes + dup, extra, repacked, mmap, notes


def estimate(facts: ModelFacts, cfg: Config, calib: Calibration | None = None, *,
             cpu: frozenset[str] | None = None) -> Breakdown:
    """Bytes ``cfg`` needs for ``facts`` on a CPU with features ``cpu`` (None: unknown; a calibration's own
    repack figure is used when there is one). Deterministic and cheap: the search calls it thousands of
    times."""
    weights, double, repacked, mmap, notes = weights_held(facts, cfg, calib, cpu)
    streams, cells = stream_cells(cfg)
    # One KV stream per sequence (the API's slots): a ubatch's graph attends over one stream's cells, so its
    # compute buffer is a one-stream context's (measured: serve --parallel 2 on Gemma-3-270M read +11 % when
    # priced at the total context).
    graph = cfg if streams == 1 else replace(cfg, n_ctx=cells, n_seq_max=1, kv_unified=True)
    looked = calib.lookup(graph) if calib else None
    if looked is None:
        compute, touched, output = formula_compute(facts, graph)
        compute_bound = compute
        overhead = formula_overhead(facts)
        estimate_only = True
        notes.append("compute buffer and overhead from formulas (no llama.cpp dry run for this model)")
    else:
        compute, compute_bound, touched, output = looked
        assert calib is not None
        overhead = calib.model_overhead + calib.context_overhead
        estimate_only = False
    output *= streams  # one output row of logits per sequence (llama.cpp's n_outputs_max of a context)
    if not facts.known_architecture:
        estimate_only = True
        notes.append(f"architecture {facts.architecture!r} is not modelled exactly: estimate only")
    if not cfg.flash_attn:
        # ggml-cpu converts the softmaxed scores to f16 for the KQV product in its own work buffer.
        overhead += padded_cells(graph.n_ctx) * cfg.n_ubatch * max(facts.n_head or (1,)) * 2
    ram_w, gpu_w = weights_split(facts, cfg.n_gpu_layers)
    weights += ram_w + gpu_w - facts.weights_bytes  # a tied embedding's output copy on the GPU
    kv = memory_bytes(facts, cfg)
    gpu_kv = memory_bytes(facts, cfg, gpu_layers(facts, cfg.n_gpu_layers).start) if cfg.n_gpu_layers > 0 else 0
    gpu_compute = device_compute(graph, calib if looked is not None else None, compute, notes)
    arrays = batch_bytes(cfg)
    runtime = overhead + DECODE_OVERHEAD + arrays + HOST_PER_CELL * streams * cells
    kept, allocated = _kept(facts, cfg, notes)
    committed = weights + kv + compute + output + arrays + allocated
    resident = weights + double + kv + touched + output + runtime + kept
    # A small model with a large vocabulary (Gemma-3's 262K) peaks during the load, before its context exists.
    at_load = weights + double + load_peak(facts, calib if looked is not None else None)
    bare = max(resident - kept, at_load)
    if at_load > resident:
        notes.append(f"the peak is the model load ({at_load / MIB:.0f} MiB: the vocabulary's metadata is held "
                     "until the loader is done), not the full context")
        resident = at_load
    return Breakdown(weights=weights, kv=kv, compute=compute, output=output, runtime=runtime,
                     committed=committed, resident=resident, gpu=gpu_w + gpu_kv + gpu_compute,
                     committed_bound=committed - compute + compute_bound,
                     estimate=estimate_only, notes=notes, repacked=repacked, mmap=mmap, kept=kept,
                     kept_committed=allocated, resident_bare=bare, touched=touched, weights_extra=double)


def device_compute(cfg: Config, calib: Calibration | None, compute: int, notes: list[str]) -> int:
    """Bytes of the compute buffer on the GPU device. With layers offloaded: the whole figure (measured on
    Vulkan: the device's buffer is the CPU build's, 98.3 MiB for the default model at 4K, plus a few MiB of
    pinned host memory). With none: what the dry run of this build reports on the device
    (``Calibration.device_points``). That is nothing while the engine keeps prompt offload off at 0 layers
    (llama_setup.prompt_offload); with llama.cpp's default the device would reserve 128 MiB there."""
    if cfg.n_gpu_layers > 0:
        notes.append("the GPU share of the compute buffer is estimated as the whole CPU figure")
        return compute
    reserved = calib.device_lookup(cfg) if calib is not None else None
    return reserved or 0


def _kept(facts: ModelFacts, cfg: Config, notes: list[str]) -> tuple[int, int]:
    """(resident, allocated) bytes of the engine's checkpoints, save arena and restore mappings at their peak
    (state.kept_bytes), with a note when they count."""
    k = kept_bytes(facts, cfg)
    if k.per_checkpoint:
        notes.append(f"{k.kept_per_seq} checkpoints of up to {k.per_checkpoint / MIB:.1f} MiB per sequence "
                     f"({k.sequences}) for exact reuse on a {facts.memory} model, one more while the next is taken")
    if k.arena:
        notes.append(f"saving KV copies a whole sequence into a {k.arena / MIB:.0f} MiB buffer"
                     + (" (kept for the next save)" if k.warm_arena else " (let go after its write)")
                     + f"; a restore maps one chunk file at a time (up to {k.restore / MIB:.1f} MiB)")
    return k.peak, k.allocated
