"""The engine process: reads requests on stdin, runs them on one engine thread, writes events.

Threads: the main thread only reads stdin. ``cancel`` is handled there at once (it sets a flag the engine thread
checks before each token); every other request is queued to the engine thread, which owns the model and is the
only writer of events. Native stdout (fd 1) is redirected to stderr at start so nothing llama.cpp prints can
corrupt the protocol; events go to a private duplicate of the original stdout.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from hisho.core.engine.ops import (
    Abort,
    BatchGenerate,
    Detokenize,
    Generate,
    Hello,
    KvFlush,
    KvInfo,
    Load,
    Prefill,
    Request,
    SeqRm,
    Serve,
    StateLoad,
    StateSave,
    Tokenize,
    Unload,
    parse_request,
)
from hisho.core.engine.protocol import PROTOCOL_VERSION, ErrorKind, check_protocol, decode, encode
from hisho.engine.decode.reply import generate
from hisho.engine.decode.serving import (
    run_serving,  # at start, not on the first API request (its first-token time)
)
from hisho.engine.lib.llama_setup import GenStats, token_event
from hisho.engine.lib.process import keep_llama_log_at_info, watch_parent
from hisho.engine.model.runtime import RequestError, Runtime

log = logging.getLogger("hisho.engine")

COALESCE_S = 0.025  # token events of a reply are written at most this often after the first (emit_soon)
PROGRESS_S = 0.1    # "progress" events of one request are written at most this often (a window shows ~2 Hz)
HOLD_S = 120.0      # test hook hold_after_tokens: the longest a reply is held (a test that forgot to let go)


class Server:
    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._jobs: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._cancelled: set[int] = set()
        self._live: set[int] = set()  # ids read and not finished: a cancel for any other id is late and dropped
        self._cancel_lock = threading.Lock()
        self.runtime: Runtime | None = None
        self._closing = False
        self.test_hooks = os.environ.get("HISHO_ENGINE_TEST_HOOKS") == "1"
        self._released = threading.Event()  # test hook: a "release" ends a reply's hold (op_generate)
        self._emit_lock = threading.Lock()
        self._pending: list[bytes] = []  # token events waiting to be written together (emit_soon)
        self._last_write = 0.0
        self._kv: Any = None          # hisho.engine.kv.kvstate.KVState of the current runtime, made on first use
        self._kv_writer: Any = None
        self._deferred: deque[dict[str, Any] | None] = deque()  # jobs a serving batch put off (engine/decode/serving.py)
        self._measure_idle = False  # flash attention to be measured once the engine is idle (measure/attention.py)
        self._idle_s = 0.0          # ... after this long without a request

    # ----- output (engine thread only, except the final shutdown) ----------------------------------------

    def emit(self, message: dict[str, Any]) -> None:
        with self._emit_lock:  # the KV writer thread also reports (hisho.engine.kv.kvstate)
            self._pending.append(encode(message))  # after token events held back by emit_soon, in order
            self._write_pending()

    def emit_soon(self, message: dict[str, Any], hold: float = COALESCE_S) -> None:
        """A token event that may wait up to ``hold`` seconds to share one write with the next ones. Every write
        wakes the client's reader thread, and on a 2-core laptop each wake-up takes a core from the decode threads
        (measured: 3-4 % of decode speed at 100 tokens/s); no reader shows text faster than ~30 Hz anyway.
        The first token of a reply is never held back (time to first token), nor is anything at the end:
        the next ``emit`` writes what is pending first."""
        with self._emit_lock:
            self._pending.append(encode(message))
            if time.perf_counter() - self._last_write >= hold:
                self._write_pending()

    def flush_pending(self) -> None:
        with self._emit_lock:
            if self._pending:
                self._write_pending()

    def _write_pending(self) -> None:
        """One write of everything pending (caller holds ``_emit_lock``)."""
        self._out.write(b"".join(self._pending))
        self._pending.clear()
        self._last_write = time.perf_counter()

    def progress(self, req_id: int) -> Callable[[int, int], None]:
        """The ``on_progress`` of a request's prompt reading: a "progress" event (tokens read of the tokens to
        read), the first at once, then at most every PROGRESS_S."""
        last = [-PROGRESS_S]

        def report(done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] >= PROGRESS_S:
                last[0] = now
                self.emit({"id": req_id, "ev": "progress", "done": done, "total": total})

        return report

    def error(self, req_id: int, kind: ErrorKind, message: str) -> None:
        self.emit({"id": req_id, "ev": "error", "kind": kind.value, "message": message})

    # ----- threads --------------------------------------------------------------------------------------

    def read_loop(self, stdin: IO[bytes]) -> None:
        """Main thread: parse requests; cancel at once, queue the rest."""
        for line in stdin:
            try:
                req = decode(line)
            except ValueError:
                log.error("unparseable request line: %r", line[:200])
                continue
            if req.get("op") == "cancel":
                # A cancel may come after its request finished (a client closing a reply it read to the end);
                # only a request still queued or running is marked, so the set holds nothing finished.
                with self._cancel_lock:
                    target = int(req.get("target", -1))
                    if target in self._live:
                        self._cancelled.add(target)
                continue
            if req.get("op") == "release":  # test hook: the reply held by hold_after_tokens goes on
                if self.test_hooks:
                    self._released.set()
                continue
            with self._cancel_lock:
                self._live.add(int(req.get("id", -1)))
            self._jobs.put(req)
            if req.get("op") == "shutdown":
                break
        else:
            # stdin closed: the parent is gone. Stop whatever runs now and exit.
            self._closing = True
        self._jobs.put(None)

    def engine_loop(self) -> None:
        """Engine thread: run requests one at a time (a serving batch runs many; engine/decode/serving.py)."""
        while True:
            req = self._deferred.popleft() if self._deferred else self._next_job()
            if req is None or self.run_job(req):
                break
        if self._kv_writer is not None:
            self._kv_writer.wait_idle(10.0)  # KV files in flight land before the process exits
        if self.runtime is not None:
            self.runtime.close()

    def _next_job(self) -> dict[str, Any] | None:
        """The next request; while one is awaited after a load that left flash attention to be measured, the
        measurement runs once nothing has come for ``_idle_s``, and gives way to the first request that does."""
        while self._measure_idle and self.runtime is not None:
            try:
                return self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                from hisho.engine.measure import attention

                rt = self.runtime
                self._measure_idle = not attention.when_idle(rt.model, rt.params, lambda: not self._jobs.empty())
        return self._jobs.get()

    def run_job(self, req: dict[str, Any]) -> bool:
        """Run one request; True when it was ``shutdown``."""
        req_id = int(req.get("id", -1))
        op = str(req.get("op", ""))
        if op == "shutdown":
            self.emit({"id": req_id, "ev": "result", "result": {}})
            return True
        try:
            self.dispatch(req_id, parse_request(req))
        except Exception as exc:
            kind = ErrorKind.of(getattr(exc, "kind", ErrorKind.INTERNAL))
            if kind is ErrorKind.INTERNAL:
                log.exception("request %s (%s) failed", req_id, op)
            self.error(req_id, kind, str(exc) or type(exc).__name__)
        finally:
            self.forget_cancel([req_id])
        return False

    def next_job_nowait(self) -> dict[str, Any] | None:
        """The next queued request, or None if there is none now (a serving batch between steps). The end of
        input (the parent is gone) comes back as ``{"op": "shutdown", "stop": True}``."""
        try:
            req = self._jobs.get_nowait()
        except queue.Empty:
            return None
        return req if req is not None else {"op": "shutdown", "id": -1, "stop": True}

    def defer(self, req: dict[str, Any]) -> None:
        self._deferred.append(None if req.get("stop") else req)

    def forget_cancel(self, req_ids: list[int]) -> None:
        """These requests are finished: a cancel for them from now on is late (dropped)."""
        with self._cancel_lock:
            self._cancelled.difference_update(req_ids)
            self._live.difference_update(req_ids)

    def is_cancelled(self, req_id: int) -> bool:
        with self._cancel_lock:
            return self._closing or req_id in self._cancelled

    # ----- requests -------------------------------------------------------------------------------------

    def dispatch(self, req_id: int, req: Request) -> None:
        handler = getattr(self, "op_" + req.op, None)
        if handler is None:
            self.error(req_id, ErrorKind.BAD_REQUEST, f"op {req.op!r} is not available in this engine")
            return
        handler(req_id, req)

    def result(self, req_id: int, result: dict[str, Any]) -> None:
        self.emit({"id": req_id, "ev": "result", "result": result})

    def need_runtime(self) -> Runtime:
        if self.runtime is None:
            raise RequestError(ErrorKind.NOT_LOADED, "no model is loaded")
        if self.runtime.ctx is None:  # a batch job's context swap could not make the chat context again
            self.runtime.close()
            self.runtime = None
            raise RequestError(ErrorKind.NOT_LOADED, "the model's context was lost (out of memory?); load it again")
        return self.runtime

    def op_hello(self, req_id: int, req: Hello) -> None:
        import llama_cpp

        from hisho.engine.lib import backends

        check_protocol(req.protocol, "window or command line")
        report = backends.init()  # before llama_supports_gpu_offload, which would load from the wrong place
        self.result(req_id, {
            "pid": os.getpid(), "protocol": PROTOCOL_VERSION, "llama_cpp_version": llama_cpp.__version__,
            "backends": report.to_dict(),
            "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
            "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
            "test_hooks": self.test_hooks,
        })

    def op_load(self, req_id: int, req: Load) -> None:
        params = req.params
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        reading = self.progress(req_id)

        def loading(fraction: float) -> bool:  # "progress" in thousandths of the file; a cancel stops the load
            reading(int(fraction * 1000), 1000)
            return not self.is_cancelled(req_id)

        self.runtime = Runtime.load(params, loading)
        from hisho.engine.measure import attention

        self._idle_s = attention.idle_seconds()
        self._measure_idle = self._idle_s > 0 and attention.pending(self.runtime.params)
        self.result(req_id, self.runtime.info())

    def op_unload(self, req_id: int, req: Unload) -> None:
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        self.result(req_id, {})

    def op_tokenize(self, req_id: int, req: Tokenize) -> None:
        tokens = self.need_runtime().prompt_tokens(req.spec())
        self.result(req_id, {"tokens": tokens, "count": len(tokens)})

    def op_detokenize(self, req_id: int, req: Detokenize) -> None:
        self.result(req_id, {"text": self.need_runtime().detokenize([int(t) for t in req.tokens])})

    def op_seq_rm(self, req_id: int, req: SeqRm) -> None:
        rt = self.need_runtime()
        rt.seq_rm(req.seq, req.start)
        self.result(req_id, {"held": len(rt.seqs.get(req.seq, []))})

    def op_generate(self, req_id: int, req: Generate) -> None:
        rt = self.need_runtime()
        sampling = req.sampling
        prompt = rt.prompt_tokens(req.spec())
        seq = req.seq
        emit = self.emit
        hooks = req.test_hooks if self.test_hooks else None
        hold = int((hooks or {}).get("hold_after_tokens", 0))
        forced = rt.forced_tokens(hooks)
        self._released.clear()  # a release sent from here on (after any token of this reply) counts
        sent = 0
        try:
            cancelled, progress = (lambda: self.is_cancelled(req_id)), self.progress(req_id)
            for item in generate(rt, seq, prompt, sampling, cancelled, progress, forced):
                if isinstance(item, GenStats):
                    seen = {"image_encodes": rt.vision.encodes} if rt.vision is not None else {}
                    emit({"id": req_id, "ev": "done", **item.as_dict(), "threads": rt.threads_info(), **seen})
                    continue
                event = token_event(rt, req_id, *item)
                if sent == 0:  # the first token is never held back (time to first token)
                    emit(event)
                else:
                    self.emit_soon(event)
                sent += 1
                if sent == hold:
                    self.hold(req_id)
        finally:
            self.flush_pending()

    def hold(self, req_id: int) -> None:
        """Test hook ``hold_after_tokens``: write the tokens sent so far, then wait (asleep) until the reply is
        cancelled or released, at most HOLD_S. The reply then goes on; a cancel is seen before its next token."""
        self.flush_pending()
        end = time.monotonic() + HOLD_S
        while not self.is_cancelled(req_id) and not self._released.wait(0.01):
            if time.monotonic() > end:
                log.warning("test hook: reply %s held %.0f s without a cancel or release; going on", req_id, HOLD_S)
                break

    def op_batch_generate(self, req_id: int, req: BatchGenerate) -> None:
        """Several prompts as parallel sequences of one context (engine/decode/batched.py). One "token" event per
        finished item (its whole text, in finishing order), then "done" with the batch's timing figures."""
        from hisho.engine.decode.batched import BatchStats, Item, run_batched

        rt = self.need_runtime()
        sampling = req.sampling
        items = [Item(i, rt.prompt_tokens(p.spec()), p.max_tokens if p.max_tokens is not None else sampling.max_tokens)
                 for i, p in enumerate(req.prompts())]
        n_parallel = req.n_parallel if req.n_parallel is not None else rt.n_seq_max
        per_seq = req.n_ctx_per_seq

        def run(target: Runtime) -> BatchStats:
            return run_batched(target, items, sampling, n_parallel, lambda: self.is_cancelled(req_id),
                               lambda done: self.emit({"id": req_id, "ev": "token", **done}), self.progress(req_id))

        if per_seq > 0:  # a job context: one KV stream per sequence (Runtime.job_context says why)
            n_parallel = max(1, min(n_parallel, len(items)))
            with rt.job_context(n_parallel, per_seq) as job_rt:
                stats = run(job_rt)
        else:
            stats = run(rt)
        self.emit({"id": req_id, "ev": "done", "stop_reason": "cancelled" if stats.cancelled else "done",
                   **stats.as_dict()})

    def op_serve(self, req_id: int, req: Serve) -> None:
        """An API request: starts the serving batch, or joins it when it arrives between steps."""
        run_serving(self, req_id, req)

    def restorer(self, req: Serve) -> Any:
        """The disk prompt cache's restore for a ``serve`` request: (seq, prompt) -> tokens now in seq."""
        chunks, keep = list(req.chunks or []), req.keep

        def restore(seq: int, prompt: list[int]) -> int:
            return int(self.kvstate().restore(seq, chunks, keep, prompt)["restored"])

        return restore

    def saver(self, req: Serve) -> Any:
        """The disk prompt cache's save for a ``serve`` request: (seq, done) saves what seq holds."""
        from pathlib import Path

        kv_dir, chunk_tokens = Path(str(req.save_dir)), req.chunk_tokens

        def save(seq: int, done: Any) -> None:
            self.kvstate().save(seq, kv_dir, chunk_tokens, done)

        return save

    # ----- KV persistence (hisho.engine.kv.kvstate; docs/kv-format.md) ----------------------------------------

    def kvstate(self) -> Any:
        from hisho.engine.kv.chunkwriter import ChunkWriter
        from hisho.engine.kv.kvstate import KVState

        rt = self.need_runtime()
        if self._kv is None or self._kv.rt is not rt:
            self._kv_writer = self._kv_writer or ChunkWriter()
            self._kv = KVState(rt, self._kv_writer)
        return self._kv

    def op_kv_info(self, req_id: int, req: KvInfo) -> None:
        kv = self.kvstate()
        if req.prepare_bytes:
            kv.prepare(req.prepare_bytes)
        self.result(req_id, kv.info())

    def op_state_save(self, req_id: int, req: StateSave) -> None:
        """Streaming: returns to the queue after the in-memory copy; "done" comes when the files are written."""
        from pathlib import Path

        hooks = req.test_hooks if self.test_hooks else None
        self.kvstate().save(req.seq, Path(req.dir), req.chunk_tokens,
                            lambda report: self.emit({"id": req_id, "ev": "done", **report}), hooks)

    def op_state_load(self, req_id: int, req: StateLoad) -> None:
        want = [int(t) for t in req.tokens] if req.tokens is not None else None
        self.result(req_id, self.kvstate().restore(req.seq, list(req.chunks), req.keep, want, use_map=req.map))

    def op_prefill(self, req_id: int, req: Prefill) -> None:
        from hisho.engine.kv.kvstate import prefill

        rt = self.need_runtime()
        self.result(req_id, prefill(rt, req.seq, rt.prompt_tokens(req.spec()),
                                    lambda: self.is_cancelled(req_id), self.progress(req_id)))

    def op_kv_flush(self, req_id: int, req: KvFlush) -> None:
        """Wait until queued chunk files are written (tests, app exit)."""
        idle = self._kv_writer.wait_idle(req.timeout) if self._kv_writer else True
        self.result(req_id, {"idle": idle})

    def op_abort(self, req_id: int, req: Abort) -> None:
        """Test hook: die the way a failed GGML_ASSERT does (ggml_abort -> abort())."""
        if not self.test_hooks:
            self.error(req_id, ErrorKind.BAD_REQUEST, "abort is a test hook; set HISHO_ENGINE_TEST_HOOKS=1")
            return
        from hisho.engine.lib.native import ggml_abort

        ggml_abort("hisho test hook: simulated GGML_ASSERT failure")


def main() -> int:
    # Keep fd 1 for the protocol only: native code printing to stdout would corrupt it.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(proto_fd, "wb", buffering=0)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s engine[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    keep_llama_log_at_info()
    log.info("engine process started at %s", time.strftime("%Y-%m-%d %H:%M:%S"))
    watch_parent()
    server = Server(out)
    worker = threading.Thread(target=server.engine_loop, name="hisho-engine", daemon=True)
    worker.start()
    server.read_loop(sys.stdin.buffer)
    worker.join()
    out.flush()
    return 0
