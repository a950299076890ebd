"""The model and its context, driven through llama.cpp's C API (llama_cpp's ctypes bindings).

Runs on the engine thread only: nothing here is thread-safe, by design (one owner thread per native resource).
We use the low-level API rather than ``llama_cpp.Llama`` because later features need what ``Llama`` hides:
several sequences in one context (``n_seq_max``), per-sequence KV state save/restore into our own buffers,
and ``llama_memory_seq_rm`` for type-ahead rollback. ``Runtime.seqs`` mirrors which tokens each sequence holds
in the KV cache, so a new prompt only prefills what differs from what is already there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import ErrorKind, LoadParams, common_prefix
from hisho.core.units import padded_cells
from hisho.engine.lib import backends, hugepages
from hisho.engine.lib.llama_setup import (
    Batch,
    context_params,
    make_governors,
    maps_file,
    model_params,
    prompt_offload,
    read_metadata,
    step_kind,
)
from hisho.engine.lib.process import give_back_heap
from hisho.engine.model import offload
from hisho.engine.model.chat import BASE_MODEL_NOTICE, ChatTemplate
from hisho.engine.model.controls import Controls
from hisho.engine.model.prefix import PrefixKeeper
from hisho.engine.model.reasoning import reasoning_format
from hisho.engine.model.vision import Vision, VisionError, image_parts, next_image

log = logging.getLogger("hisho.engine")



class RequestError(Exception):
    """An error with a protocol kind (``hisho.core.engine.protocol.ErrorKind``)."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Runtime:
    """A loaded model with one context. Create with ``Runtime.load``; ``close()`` frees everything."""

    def __init__(self, params: LoadParams, model: Any, ctx: Any, load_s: float) -> None:
        self.params = params
        self.model = model
        self.ctx = ctx
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.load_s = load_s
        self.mmap = True
        self.offload_probe: dict[str, Any] | None = None  # the prompt-offload probe behind params.op_offload
        self.governors = make_governors(params)
        self._bind(ctx)
        self._piece_buf = ctypes.create_string_buffer(256)
        self.metadata = read_metadata(model)
        self.controls = Controls(self.vocab, self.n_vocab, self.token_text, self.tokenize)
        self.template = ChatTemplate.from_model(self.metadata, self.token_text, self.is_special_token)
        self.reasoning = reasoning_format(self.template, self.tokenize)
        self.vision: Vision | None = None  # the projector, when the model was loaded with one (docs/images.md)

    def _bind(self, ctx: Any) -> None:
        """Point everything that depends on the context at ``ctx``; no sequence holds anything yet."""
        self.ctx = ctx
        self.memory = llama_cpp.llama_get_memory(ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(ctx))  # cells one sequence can use (< n_ctx per stream)
        self.n_batch = int(llama_cpp.llama_n_batch(ctx))
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(ctx))
        self.batch = Batch(max(self.n_batch, self.n_seq_max), self.n_seq_max)
        self.seqs: dict[int, list[int]] = {}
        self.keeper = PrefixKeeper(self)  # checkpoints belong to this context
        self._threads = (-1, -1)  # (n_threads, n_threads_batch) last given to llama_set_n_threads
        self.unified_kv = bool(self.params.kv_unified)  # job_context's streams are not

    @contextmanager
    def job_context(self, n_parallel: int, n_ctx_per_seq: int) -> Iterator[Runtime]:
        """Swap the chat context for one made for a batch job: ``n_parallel`` sequences, each in its OWN KV
        stream of ``n_ctx_per_seq`` cells (``kv_unified`` off), on the same model. Afterwards the chat context
        is made again, empty.

        Why a separate context: in a unified cache every token attends over the cells of ALL sequences (masked),
        so 8 parallel 1.3K-token chunk summaries cost 8x the attention of one; per-sequence streams do not
        (measured: map phase 0.88x of one-at-a-time unified, 1.24x split). Why a swap, not a second context:
        the job gets the cells the memory plan gave the chat context (callers keep ``n_parallel ×
        n_ctx_per_seq`` <= ``n_ctx``), so the footprint stays what the planner predicted. What the chat
        sequences held is dropped; KV persistence restores it from disk on the next turn.
        """
        n_parallel = max(1, n_parallel)
        per_seq = padded_cells(n_ctx_per_seq)  # llama.cpp pads contexts to 256 cells anyway
        job = dataclasses.replace(self.params, n_ctx=n_parallel * per_seq, n_seq_max=n_parallel, kv_unified=False)
        self._free_context()
        try:
            self._let_go_of_checkpoints()
            self._bind(self._new_context(job))
            self.unified_kv = False
            log.info("job context: %d sequences x %d cells", n_parallel, per_seq)
            yield self
        finally:
            self._free_context()
            self._let_go_of_checkpoints()
            self._bind(self._new_context(self.params))

    def _let_go_of_checkpoints(self) -> None:
        """Drop the freed context's checkpoints and give their pages back: each is a heap block (a 7.5 MiB
        window on Gemma-3-270M, dozens of them once a long prompt was read with its interval marks) that glibc
        would keep resident under the next context (measured: the summary job's peak 39 MiB over the chat
        context's, on top of the 297 MiB of checkpoints the chat no longer has)."""
        self.keeper.reset()
        give_back_heap()

    def _free_context(self) -> None:
        """Free the context and its batch; ``ctx`` is None until ``_bind`` (no-op if already None)."""
        if self.ctx is not None:
            self.batch.free()
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def _new_context(self, params: LoadParams) -> Any:
        ctx = llama_cpp.llama_init_from_model(self.model, context_params(params))
        if not ctx:
            raise RequestError(ErrorKind.MODEL_LOAD, f"llama.cpp could not create a context of {params.n_ctx} cells "
                                             f"for {params.n_seq_max} sequences (out of memory?)")
        return ctx

    # ----- loading ------------------------------------------------------------------------------------

    @classmethod
    def load(cls, params: LoadParams, on_progress: Callable[[float], bool] | None = None) -> Runtime:
        """``on_progress(fraction)`` reports the file's loading (llama.cpp's callback); False stops it."""
        backends.init()
        mapped = maps_file(params)
        start = time.perf_counter()
        stopped = [False]

        advised = [False]

        def report(fraction: float) -> bool:
            if not advised[0]:  # the weight buffers exist, nothing is read into them yet
                advised[0] = True
                hugepages.advise_untouched()
            stopped[0] = on_progress is not None and not on_progress(fraction)
            return not stopped[0]

        mparams = model_params(params, mapped, report)
        model = llama_cpp.llama_model_load_from_file(params.model_path.encode("utf-8"), mparams)
        if not model and stopped[0]:
            raise RequestError(ErrorKind.MODEL_LOAD, f"the load of {params.model_path} was cancelled")
        if not model:
            raise RequestError(ErrorKind.MODEL_LOAD, f"llama.cpp could not load the model file: {params.model_path}")
        try:  # a partial offload's prompt offload, measured here unless kept (hisho.core.planner.offload)
            params, offload_probe = offload.decide(model, params)
        except Exception:
            llama_cpp.llama_model_free(model)
            raise
        ctx = llama_cpp.llama_init_from_model(model, context_params(params))
        if not ctx:
            llama_cpp.llama_model_free(model)
            raise RequestError(
                ErrorKind.MODEL_LOAD,
                f"llama.cpp could not create a context (n_ctx {params.n_ctx}, KV {params.type_k}/{params.type_v}; "
                "quantized V needs flash attention)",
            )
        try:
            runtime = cls(params, model, ctx, time.perf_counter() - start)
            runtime.calibrate_threads()
            if params.mmproj_path:
                runtime.vision = Vision.open(model, params.mmproj_path, params.n_threads_batch or params.n_threads
                                             or int(llama_cpp.llama_n_threads_batch(ctx)), params.n_gpu_layers != 0)
        except VisionError as exc:
            llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(model)
            raise RequestError(exc.kind, str(exc)) from None
        except Exception:
            llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(model)
            raise
        runtime.mmap = mapped
        runtime.offload_probe = offload_probe
        log.info("loaded %s (%s): n_ctx %d, n_batch %d, n_seq_max %d in %.2fs", params.model_path,
                 "mmap" if mapped else "read, no mmap", runtime.n_ctx, runtime.n_batch, runtime.n_seq_max,
                 runtime.load_s)
        return runtime

    def close(self) -> None:
        if self.vision is not None:
            self.vision.close()
            self.vision = None
        self._free_context()  # ctx is already None after a job context whose chat context could not be made again
        llama_cpp.llama_model_free(self.model)
        self.model = None

    def info(self) -> dict[str, Any]:
        return {
            "n_ctx": self.n_ctx, "n_ctx_seq": self.n_ctx_seq, "n_batch": self.n_batch, "n_seq_max": self.n_seq_max, "n_vocab": self.n_vocab,
            "n_ctx_train": int(llama_cpp.llama_model_n_ctx_train(self.model)),
            "model_size": int(llama_cpp.llama_model_size(self.model)),
            "n_params": int(llama_cpp.llama_model_n_params(self.model)),
            "has_chat_template": self.template.source == "gguf",
            "chat_template_source": self.template.source,
            "base_model": self.template.completion,  # plain completion: no chat template, no ChatML tokens
            "notice": BASE_MODEL_NOTICE if self.template.completion else "",
            "chat_template": self.template.text,
            "reasoning": self.reasoning.to_dict(),
            "load_s": self.load_s,
            "mmap": self.mmap,
            "op_offload": prompt_offload(self.params), "offload_probe": self.offload_probe,
            "architecture": self.metadata.get("general.architecture", ""),
            "name": self.metadata.get("general.name", ""),
            "vision": self.vision is not None,
            **(self.vision.info() if self.vision is not None else {}),
        }

    # ----- tokens -------------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        """``token``'s bytes; without ``special`` control tokens and the model's markup tokens are empty (a
        reply's text), with it they are shown (the raw reply a format parser reads)."""
        if not special and token in self.controls.markup():
            return b""
        n = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            self._piece_buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        return self._piece_buf.raw[:n]

    def token_text(self, token: int) -> str:
        return self.piece(token, special=True).decode("utf-8", "replace")

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def raw_text(self, tokens: list[int]) -> str:
        """``tokens`` as text with their special tokens shown (a reply's "raw_text": the markers a reply's
        parser reads, harmony's ``<|channel|>`` and the like, which ``detokenize`` drops)."""
        return b"".join(self.piece(t, special=True) for t in tokens).decode("utf-8", "replace")

    def shown_piece(self, token: int, plain: bytes) -> str | None:
        """A token event's "piece": the token's text with special tokens shown, where it differs from
        ``plain`` (its ordinary piece); None for ordinary tokens (the event carries no "piece" then)."""
        shown = self.piece(token, special=True)
        return None if shown == plain else shown.decode("utf-8", "replace")

    def forced_tokens(self, hooks: dict[str, Any] | None) -> list[int] | None:
        """The test hook ``force_text`` of a request's ``test_hooks`` (only honoured with the engine's test
        hooks on; the caller checks): its text tokenized with special tokens parsed, the reply to decode."""
        text = (hooks or {}).get("force_text")
        return None if text is None else self.tokenize(str(text), add_special=False, parse_special=True)

    def prompt_tokens(self, request: dict[str, Any]) -> list[int]:
        """Tokens for a request holding ``messages`` (chat template), ``prompt`` (raw text) or ``tokens``."""
        if "tokens" in request:
            return [int(t) for t in request["tokens"]]
        if "messages" in request:
            self._no_control_text(request)
            messages, images, marker = image_parts(request["messages"])
            if images and self.vision is None:
                raise RequestError(ErrorKind.BAD_REQUEST, "this model cannot see images (it has no projector)")
            # The template writes BOS itself where the model wants it.
            parts = self.template.render_parts(messages, request.get("add_generation_prompt", True),
                                               request.get("tools"), request.get("template_kwargs"))
            return self._with_images(parts, images, marker) if images else self.template_tokens(parts)
        if "prompt" in request:  # raw text whose caller wrote the model's markup itself (benchmarks, tests)
            return self.tokenize(str(request["prompt"]), add_special=True, parse_special=True)
        if "text" in request:
            return self.tokenize(str(request["text"]), add_special=False,
                                 parse_special=bool(request.get("special", False)))
        raise RequestError(ErrorKind.BAD_REQUEST, "request needs messages, prompt, tokens or text")

    def _with_images(self, parts: list[tuple[str, bool]], images: list[dict[str, Any]],
                     marker: re.Pattern[str]) -> list[int]:
        """A rendered prompt's tokens with each image's tokens where its marker is (hisho.engine.model.vision)."""
        from hisho.core import paths

        assert self.vision is not None
        try:
            return self.vision.splice(parts, images, marker, self.template_tokens, paths.data_dir())
        except VisionError as exc:
            raise RequestError(exc.kind, str(exc)) from None

    # ----- control tokens only from the template (hisho.engine.model.controls) ------------------------------

    def _no_control_text(self, request: dict[str, Any]) -> None:
        try:
            self.controls.refuse_in_tools(request)
        except ValueError as exc:
            raise RequestError(ErrorKind.BAD_REQUEST, str(exc)) from None

    def template_tokens(self, parts: list[tuple[str, bool]]) -> list[int]:
        return self.controls.template_tokens(parts)

    def is_special_token(self, text: str) -> bool:
        return self.controls.is_special(text)

    # ----- KV bookkeeping ---------------------------------------------------------------------------------

    def seq_rm(self, seq: int, start: int = 0) -> int:
        """Keep sequence ``seq``'s first ``start`` tokens (none with start 0) where the memory can continue from
        there exactly, else the longest exact prefix below it (hisho.engine.model.prefix: the one reuse rule).
        Returns how many tokens it holds now. Dense models: a plain cut, as always."""
        return self.keeper.keep(seq, start)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)
        self.seqs.clear()
        self.keeper.reset()

    def check_seq(self, seq: int) -> None:
        if not 0 <= seq < self.n_seq_max:
            raise RequestError(ErrorKind.BAD_REQUEST, f"sequence id {seq} outside 0..{self.n_seq_max - 1}")

    def reuse_prefix(self, seq: int, tokens: list[int]) -> int:
        """Keep the longest prefix of ``tokens`` already in ``seq``'s cache, minus one token so the last one is
        evaluated again (a KV cell holds no logits), as far as the memory can continue from there exactly
        (``seq_rm``). Returns how many tokens are kept."""
        held = self.seqs.get(seq, [])
        common = min(common_prefix(held, tokens), len(tokens) - 1)
        if self.vision is not None:
            return self.keep_upto(seq, tokens, common)
        if common < len(held) or not self.keeper.dense:  # non-dense: even a whole prefix is checked
            common = self.seq_rm(seq, common)
        return common

    def keep_upto(self, seq: int, tokens: list[int], keep: int) -> int:
        """``seq_rm(seq, keep)``, never ending inside an image of ``tokens`` (an image is read whole: a cut inside
        it backs off to its start; hisho.engine.model.vision). Returns how many tokens are kept."""
        if self.vision is None:
            return self.seq_rm(seq, keep)
        while True:
            floor = self.vision.span_floor(tokens, keep)
            kept = self.seq_rm(seq, floor)
            if kept == floor or self.vision.span_floor(tokens, kept) == kept:
                return kept
            keep = kept

    def decode_tokens(self, seq: int, tokens: list[int], *, want_logits: bool = True,
                      should_stop: Callable[[], bool] | None = None,
                      on_progress: Callable[[int, int], None] | None = None, note_slices: bool = False,
                      checkpoints: bool = True) -> bool:
        """Append ``tokens`` to ``seq`` in n_batch slices. Logits only for the very last token.
        Returns False if ``should_stop`` said stop between slices (the cache then holds what was done).
        ``on_progress(done, total)`` runs after every slice but the last (a long prompt's reading progress).
        ``note_slices``: tell the keeper each slice (a reply's prompt: ``PrefixKeeper.note_slice``).
        ``checkpoints`` (sliding-window and recurrent models): a slice also ends at every interval mark and a
        checkpoint is taken there (``PrefixKeeper.interval_checkpoint``; off only for measurements)."""
        held = self.seqs.setdefault(seq, [])
        if len(held) + len(tokens) > self.n_ctx:
            raise RequestError(ErrorKind.CONTEXT_FULL,
                                f"{len(held) + len(tokens)} tokens do not fit the context of {self.n_ctx}")
        first = len(held)
        # A reading that ends on a mark takes it too (not one that wants logits: its caller samples next).
        marks = self.keeper.marks(first, first + len(tokens) + (0 if want_logits else 1)) if checkpoints else []
        bounds = sorted({m - first for m in marks} | {len(tokens)})
        done = 0
        for stop in bounds:
            while done < stop:
                if should_stop is not None and done and should_stop():
                    return False
                if tokens[done] < 0:  # an image: encoded and decoded in one piece (hisho.engine.model.vision)
                    done = self._decode_image(seq, tokens, done, want_logits)
                    continue
                part = tokens[done:next_image(tokens, done, min(stop, done + self.n_batch))]
                self.batch.clear()
                base = len(held)
                last_slice = done + len(part) >= len(tokens)
                for i, tok in enumerate(part):
                    self.batch.add(tok, base + i, seq, want_logits and last_slice and i == len(part) - 1)
                began = time.perf_counter()
                self.decode_batch()
                self.keeper.note_speed(len(part), time.perf_counter() - began)
                held.extend(part)
                done += len(part)
                if note_slices:
                    self.keeper.note_slice(seq, base, len(held))
                if on_progress is not None and not last_slice:
                    on_progress(done, len(tokens))
            if first + stop in marks and done == stop:
                self.keeper.interval_checkpoint(seq)
        return True

    def _decode_image(self, seq: int, tokens: list[int], start: int, want_logits: bool) -> int:
        """The image whose placeholders start at ``tokens[start]`` into ``seq``; returns where it ends."""
        held = self.seqs[seq]
        end = self.decode_image_at(seq, tokens, start, len(held), want_logits)
        held.extend(tokens[start:end])
        return end

    def decode_image_at(self, seq: int, tokens: list[int], start: int, pos: int, want_logits: bool = False) -> int:
        """Encode the image whose placeholders start at ``tokens[start]`` and decode it into ``seq`` at position
        ``pos`` (the caller keeps the token lists); returns where its placeholders end."""
        if self.vision is None:
            raise RequestError(ErrorKind.BAD_REQUEST, "this model cannot see images (it has no projector)")
        try:
            end = self.vision.span_end(tokens, start)
            if end > len(tokens):  # a caller split the prompt inside an image: its cells would not match the list
                raise VisionError(ErrorKind.INTERNAL, "a prompt piece ends inside an image")
            n_batch = min(self.n_batch, int(llama_cpp.llama_n_ubatch(self.ctx)))  # one ubatch: one llama_decode
            self.vision.eval_span(self.ctx, tokens[start], pos, seq, n_batch, want_logits and end >= len(tokens))
        except VisionError as exc:
            raise RequestError(exc.kind, str(exc)) from None
        self._threads = (-1, -1)  # libmtmd's decodes ran with the context's threads as they were
        return end

    def run_step(self, batch: Batch) -> int:
        """``llama_decode`` on ``batch`` with the thread count its kind of step gets now (hisho.engine.lib.threads);
        the step's time goes back to that governor. Returns llama_decode's code.

        llama.cpp uses ``n_threads`` for one-token batches and ``n_threads_batch`` for the rest; both are set
        between steps with ``llama_set_n_threads`` (it only stores them: the next graph is planned with them)."""
        n = batch.n
        gov = self.governors[step_kind(n)]
        cells = self.step_cells(batch)
        threads = gov.choose(n, cells)
        want = (threads, self._threads[1]) if n == 1 else (self._threads[0], threads)
        if want != self._threads:
            llama_cpp.llama_set_n_threads(self.ctx, max(1, want[0]), max(1, want[1]))
            self._threads = want
        start = time.perf_counter()
        rc = int(llama_cpp.llama_decode(self.ctx, batch.raw))
        if rc == 0:
            gov.observe(threads, time.perf_counter() - start, n, cells)
        return rc

    def step_cells(self, batch: Batch) -> int:
        """About how many KV cells a step on ``batch`` attends over (what its attention costs grow with): the
        context of each sequence in it after the step, and in a unified cache the other sequences' cells too
        (llama.cpp's attention view then spans every sequence's cells)."""
        cells = sum(batch.ends.values())
        if self.unified_kv:
            cells += sum(len(held) for seq, held in self.seqs.items() if seq not in batch.ends)
        return cells

    def calibrate_threads(self) -> None:
        """Time one decode step at the most threads and at one (after a warm-up step: first graph, page faults)
        on a scratch token, so that an engine started on a busy machine does not begin with collapsed steps
        (hisho.engine.lib.threads). About 30 ms on an idle 2-core laptop with the default model."""
        gov = self.governors["decode"]
        if gov.fixed or gov.max < 2 or self.seqs:
            return
        token = max(0, int(llama_cpp.llama_vocab_bos(self.vocab)))
        costs: dict[int, float] = {}
        for n in (gov.max, 1, gov.max):
            llama_cpp.llama_set_n_threads(self.ctx, n, n)
            self.batch.clear()
            self.batch.add(token, 0, 0, True)  # with logits, like every decode step
            start = time.perf_counter()
            rc = llama_cpp.llama_decode(self.ctx, self.batch.raw)
            costs[n] = time.perf_counter() - start
            llama_cpp.llama_memory_seq_rm(self.memory, 0, 0, -1)
            if rc != 0:
                return
        self._threads = (-1, -1)
        gov.calibrated(costs)
        log.info("threads at load: a decode step took %s; decode uses %d",
                 ", ".join(f"{costs[n] * 1000:.1f} ms at {n}" for n in sorted(costs)), gov.current)

    def threads_info(self) -> dict[str, Any]:
        """What each governor chose and why (``done`` events, ``hisho bench decode``)."""
        return {kind: gov.explain() for kind, gov in self.governors.items()}

    def decode_batch(self) -> None:
        rc = self.run_step(self.batch)
        if rc == 1:
            raise RequestError(ErrorKind.CONTEXT_FULL, "no KV cache slot left for this batch (context full)")
        if rc != 0:
            raise RequestError(ErrorKind.INTERNAL, f"llama_decode failed with code {rc}")
