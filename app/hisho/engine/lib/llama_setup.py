"""How a model and its context are set up for llama.cpp: context parameters, thread governors,
the mmap policy and the model's metadata. Split out of ``hisho.engine.model.runtime`` (the one owner of the context)
so that module stays about driving it. Engine thread only, like everything that touches llama.cpp objects.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from hisho.core.engine.protocol import LoadParams
from hisho.engine.lib import backends
from hisho.engine.lib.threads import Governor

_SPECIAL_ATTRS = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN

KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
            "f32": llama_cpp.GGML_TYPE_F32}


def physical_cores() -> int:
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unsupported platform
        n = None
    return max(1, n or os.cpu_count() or 1)


def cpu_features() -> frozenset[str]:
    """This build's CPU features as ggml reports them (what decides which weights it repacks)."""
    from hisho.core.planner.repack import features_from_system_info

    return features_from_system_info(llama_cpp.llama_print_system_info().decode("utf-8", "replace"))


def mmap_policy(model_path: str) -> bool:
    """Map the model file unless llama.cpp will repack some of its weights for this CPU: with mmap, the file
    pages read to repack stay mapped beside the repacked copy (held twice; core/planner/repack.py). A file whose
    header we cannot read is mapped (llama.cpp's load then reports what is wrong with it). Only for loads whose
    LoadParams leave ``use_mmap`` open: launch.load_params_for sets it from the plan, because reading the header
    here imports the gguf package (~7 MiB in this process)."""
    from hisho.core.errors import UserError
    from hisho.core.models.gguf_facts import read_facts
    from hisho.core.planner.repack import repacked_bytes, use_mmap

    try:
        facts = read_facts(model_path)
    except UserError:
        return True
    moved, dup = repacked_bytes(facts, cpu_features())
    return use_mmap(moved + dup)


def maps_file(params: LoadParams) -> bool:
    """Whether a load maps the model file: as its LoadParams say, else as ``mmap_policy`` decides."""
    return params.use_mmap if params.use_mmap is not None else mmap_policy(params.model_path)


def model_params(params: LoadParams, mapped: bool, on_progress: Callable[[float], bool] | None = None) -> Any:
    """``llama_model_params`` for a load: its GPU layers, the file mapped (``mapped``) or read.
    ``on_progress(fraction)`` is llama.cpp's load progress callback (False aborts the load)."""
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = params.n_gpu_layers
    mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP if mapped else llama_cpp.LLAMA_LOAD_MODE_NONE
    mparams.use_extra_bufts = backends.extra_buffers_allowed()
    if on_progress is not None:
        # The structure keeps a reference to the ctypes callback for as long as it lives (the load call).
        mparams.progress_callback = llama_cpp.llama_progress_callback(lambda p, _data: bool(on_progress(float(p))))
    return mparams


def step_kind(n_tokens: int) -> str:
    """Decode (one token), a small batch (parallel decode: one token per running sequence) or prefill: their
    costs per token differ too much to share one governor."""
    return "decode" if n_tokens == 1 else "batch" if n_tokens < PREFILL_MIN_TOKENS else "prefill"


# Not 64 (the first bound): a batch step is compared per step, and a step that carries a short prompt (the API's
# 35-token question joining 4 running sequences) cost ~10x a 4-token decode step; the governor took that for a
# collapsed step and dropped every kind of step to one thread (measured in the serving batch, docs/threads.md).
# From 16 tokens on a step is compute-bound even for a 7B model on a laptop, so its cost per token compares.
PREFILL_MIN_TOKENS = 16


def make_governors(params: LoadParams) -> dict[str, Governor]:
    """``n_threads`` 0 (the default): automatic up to the physical cores; a number: exactly that many."""
    cores = physical_cores()
    decode = params.n_threads
    batch = params.n_threads_batch or params.n_threads
    govs = {"decode": Governor("decode", cores, fixed=decode),
            # Parallel decode steps (the API's serving batch, summaries) are as frequent and as short as decode steps.
            # Compared per step: a small batch's cost is mostly reading the weights once.
            "batch": Governor("batch", cores, fixed=batch, per_token=False),
            # A prefill step is long (512 tokens: seconds under load): one step decides, and one probe step.
            "prefill": Governor("prefill", cores, fixed=batch, probe_steps=1, decide_steps=1)}
    for gov in govs.values():
        gov.peers = [g for g in govs.values() if g is not gov]
    return govs


def prompt_offload(params: LoadParams) -> bool:
    """Whether llama.cpp may run the matrix products of layers kept in RAM on the GPU (its ``op_offload``, on by
    default): for a batch of 32+ tokens it copies those layers' weights to the device, op by op. Off when no
    layer is offloaded: the copies cost more than the CPU's own product (docs/vulkan.md: on a software Vulkan
    device a 225-token prompt read 20x slower with it; a real iGPU shares the CPU's memory bus, so copying the
    weights to it gains nothing either). With layers offloaded, as the load decided it (``op_offload``: a
    measured probe with a partial offload, hisho.engine.model.offload), else llama.cpp's default."""
    if params.n_gpu_layers <= 0:
        return False
    return True if params.op_offload is None else params.op_offload


def context_params(params: LoadParams) -> Any:
    cparams = llama_cpp.llama_context_default_params()
    cparams.op_offload = prompt_offload(params)
    cparams.n_ctx = params.n_ctx
    cparams.n_batch = params.n_batch
    cparams.n_ubatch = min(params.n_ubatch, params.n_batch)
    threads = params.n_threads or physical_cores()
    cparams.n_threads = threads
    cparams.n_threads_batch = params.n_threads_batch or threads
    cparams.n_seq_max = params.n_seq_max
    cparams.kv_unified = params.kv_unified
    cparams.swa_full = params.swa_full
    cparams.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if params.flash_attn
                               else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    cparams.type_k = KV_TYPES[params.type_k]
    cparams.type_v = KV_TYPES[params.type_v]
    cparams.no_perf = True
    return cparams


def hit_stop(pieces: list[str], stops: list[str]) -> bool:
    """Does the text of the last few ``pieces`` (a reply's decoded tokens) contain one of ``Sampling.stop``'s
    strings? Every decode loop (one reply, a batch, the API's serving batch) ends a sequence on it."""
    if not stops:
        return False
    recent = "".join(pieces[-8:])
    return any(s and s in recent for s in stops)


def token_event(rt: Any, req_id: int, token: int, text: str) -> dict[str, Any]:
    """A "token" event (one reply, the serving batch): ``text`` is what a reader shows; "piece", only where
    it differs, is the token with its special text shown (a control token such as harmony's ``<|channel|>``
    has no ``text``). ``rt`` is the ``Runtime``."""
    event: dict[str, Any] = {"id": req_id, "ev": "token", "token": token, "text": text}
    shown = rt.shown_piece(token, rt.piece(token))
    if shown is not None:
        event["piece"] = shown
    return event


def logits_at(ctx: Any, i: int, n_vocab: int) -> Any:
    """The logits of batch position ``i`` (-1: the last with logits), a numpy view of llama.cpp's own buffer:
    valid until the next decode, never written."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, i)
    if not ptr:
        raise RuntimeError(f"no logits at batch position {i}")
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,))


def read_metadata(model: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    count = int(llama_cpp.llama_model_meta_count(model))
    buf = ctypes.create_string_buffer(1 << 16)
    for i in range(count):
        n = llama_cpp.llama_model_meta_key_by_index(model, i, buf, len(buf))
        if n < 0:
            continue
        key = buf.value.decode("utf-8", "replace")
        n = llama_cpp.llama_model_meta_val_str_by_index(model, i, buf, len(buf))
        if n < 0:
            continue
        if n >= len(buf):
            big = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str_by_index(model, i, big, len(big))
            out[key] = big.value.decode("utf-8", "replace")
        else:
            out[key] = buf.value.decode("utf-8", "replace")
    return out


@dataclass
class GenStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0
    stop_reason: str = ""
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    speculation: dict[str, Any] | None = None   # hisho.engine.decode.speculate: its batches and accepted drafts
    raw_text: str = ""                          # the reply with its special tokens shown (Runtime.raw_text)

    def as_dict(self) -> dict[str, Any]:
        tps = (self.completion_tokens - 1) / self.decode_s if self.decode_s > 0 and self.completion_tokens > 1 else 0.0
        return {
            "text": self.text, "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens, "ttft_s": self.ttft_s, "decode_s": self.decode_s,
            "tokens_per_s": tps, "stop_reason": self.stop_reason, "raw_text": self.raw_text,
            **({"speculation": self.speculation} if self.speculation is not None else {}),
        }


class Batch:
    """One ``llama_batch`` allocated once, refilled per decode call."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.raw = llama_cpp.llama_batch_init(capacity, 0, n_seq_max)
        self.n = 0
        self.ends: dict[int, int] = {}  # per sequence in the batch: its last position + 1 (its context after it)

    def clear(self) -> None:
        self.n = 0
        self.raw.n_tokens = 0
        self.ends.clear()

    def add(self, token: int, pos: int, seq: int, logits: bool) -> None:
        i = self.n
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = logits
        if pos >= self.ends.get(seq, 0):
            self.ends[seq] = pos + 1
        self.n = i + 1
        raw.n_tokens = self.n

    def free(self) -> None:
        llama_cpp.llama_batch_free(self.raw)


def control_tokens(vocab: Any, n_vocab: int, token_text: Callable[[int], str]) -> tuple[dict[str, int],
                                                                                        re.Pattern[str] | None]:
    """The text of every control (and unknown) token, the ones llama.cpp parses only with parse_special,
    and a pattern that finds them longest first (control tokens only from the template)."""
    ids: dict[str, int] = {}
    for token in range(n_vocab):
        if int(llama_cpp.llama_vocab_get_attr(vocab, token)) & _SPECIAL_ATTRS:
            text = token_text(token)
            if text:
                ids.setdefault(text, token)
    alts = sorted(ids, key=len, reverse=True)
    return ids, (re.compile("|".join(map(re.escape, alts))) if alts else None)


# A user-defined token that is the model's own markup, not text: snake_case markers (Gemma's "<start_of_image>",
# "<image_soft_token>"), "<|…|>" markers and "[UPPER_CASE]" markers. HTML tags that are user-defined tokens of
# some vocabularies ("<table>", "<tr>") are text, and stay.
_MARKUP = re.compile(r"<[a-z0-9]+(?:_[a-z0-9]+)+>|<\|[^|]*\|>|\[[A-Z][A-Z0-9_]*\]")
_USER_DEFINED = 1 << 4  # LLAMA_TOKEN_ATTR_USER_DEFINED


def markup_tokens(vocab: Any, n_vocab: int, token_text: Callable[[int], str]) -> frozenset[int]:
    """User-defined tokens whose text is the model's markup (``_MARKUP``): a reply's text leaves them out,
    as it leaves out control tokens, so a base model that samples "<start_of_image>" does not show it."""
    out = set()
    for token in range(n_vocab):
        if int(llama_cpp.llama_vocab_get_attr(vocab, token)) & _USER_DEFINED and _MARKUP.fullmatch(token_text(token)):
            out.add(token)
    return frozenset(out)
