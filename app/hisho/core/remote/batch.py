"""``BatchGenerate`` on a remote server: a document summary's map-reduce runs there as on the laptop. No Qt.

Each item is one streaming request; up to ``n_parallel`` run at once (capped by the server's slots where it says:
llama-server ``--parallel``), and the server decodes them together (llama-server's slots, vLLM / SGLang continuous
batching). The requests are not pinned to the chat's slot and never saved as slots (``history=None``): a
summary must not evict or overwrite the chat that resumes there.

Events are the local engine's (``hisho.engine.decode.batched``): one per finished item, in finishing order, ``{"item",
"text", "prompt_tokens", "completion_tokens", "stop_reason", "ttft_s"}``; the result's ``extra`` carries
``wall_s``, ``prefill_tokens``, ``pure_decode_s`` and ``decode_tokens_per_s`` (the summary's speed probe).

Rules of use: iterate once, from one thread. ``cancel()`` from any thread closes every open request.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hisho.core.engine.ops import BatchGenerate, Prompt
from hisho.core.engine.protocol import GenerationResult
from hisho.core.remote.http import RemoteError
from hisho.core.remote.stream import RemoteStream

if TYPE_CHECKING:
    from hisho.core.remote.engine import RemoteEngine


class RemoteBatch:
    def __init__(self, engine: RemoteEngine, request: BatchGenerate) -> None:
        self._engine, self._request = engine, request
        self.result: GenerationResult | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._open: set[RemoteStream] = set()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            streams = list(self._open)
        for s in streams:
            s.cancel()

    def collect(self) -> GenerationResult:
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def _stream(self, item: Prompt) -> RemoteStream:
        eng = self._engine
        sampling = self._request.sampling
        if item.max_tokens:
            sampling = dataclasses.replace(sampling, max_tokens=item.max_tokens)
        body: dict[str, Any] = {"model": eng.model, "stream": True, **eng._sampling(sampling)}
        body.pop("id_slot", None)                     # any free slot: the chat keeps its own
        if eng.info.kind != "llama-cpp-python":
            body["stream_options"] = {"include_usage": True}
        if item.messages is not None:
            body["messages"] = [{"role": m["role"], "content": m["content"]} for m in item.messages]
            return RemoteStream(eng, "/v1/chat/completions", body, None)
        if item.prompt is not None:
            body["prompt"] = item.prompt
            return RemoteStream(eng, "/v1/completions", body, None)
        raise RemoteError(f"{eng.name}: a remote engine takes messages or a prompt, not token ids")

    def _run(self, index: int, item: Prompt, out: queue.Queue[tuple[int, Any]]) -> None:
        try:
            if self._cancelled.is_set():
                out.put((index, None))
                return
            stream = self._stream(item)
            with self._lock:
                self._open.add(stream)
            try:
                out.put((index, stream.collect()))
            finally:
                with self._lock:
                    self._open.discard(stream)
        except BaseException as exc:  # handed to the iterating thread, which raises it
            out.put((index, exc))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        items = self._request.prompts()
        width = max(1, self._request.n_parallel or 1)
        if self._engine.info.slots:
            width = min(width, self._engine.info.slots)
        out: queue.Queue[tuple[int, Any]] = queue.Queue()
        started = time.perf_counter()
        pending = list(enumerate(items))[::-1]
        running = 0
        results: list[GenerationResult] = []
        error: BaseException | None = None
        while pending or running:
            while pending and running < width and error is None and not self._cancelled.is_set():
                index, item = pending.pop()
                threading.Thread(target=self._run, args=(index, item, out), name="remote-batch",
                                 daemon=True).start()
                running += 1
            if not running:
                break
            index, got = out.get()
            running -= 1
            if isinstance(got, BaseException):
                if error is None:
                    error = got
                    self.cancel()
                continue
            if got is None or error is not None or got.stop_reason == "cancelled":
                continue
            results.append(got)
            yield {"item": index, "text": got.text, "prompt_tokens": got.prompt_tokens,
                   "completion_tokens": got.completion_tokens, "stop_reason": got.stop_reason,
                   "ttft_s": got.ttft_s}
        if error is not None:
            raise error
        wall = time.perf_counter() - started
        decode_s = max((r.decode_s for r in results), default=0.0)
        decoded = sum(max(r.completion_tokens - 1, 0) for r in results)
        self.result = GenerationResult(
            text="", prompt_tokens=sum(r.prompt_tokens for r in results),
            completion_tokens=sum(r.completion_tokens for r in results),
            cached_tokens=sum(r.cached_tokens for r in results), ttft_s=min((r.ttft_s for r in results),
                                                                            default=0.0),
            decode_s=decode_s, tokens_per_s=decoded / decode_s if decode_s else 0.0,
            stop_reason="cancelled" if self._cancelled.is_set() else "stop",
            extra={"wall_s": wall, "pure_decode_s": decode_s, "decode_tokens_per_s":
                   decoded / decode_s if decode_s else 0.0,
                   "prefill_tokens": sum(int(r.extra.get("prompt_n", 0)) for r in results),
                   "engine": self._engine.name, "n_parallel": width})
