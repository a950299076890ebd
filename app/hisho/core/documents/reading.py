"""Reading a document once: the summary is written on the prefix the conversation keeps. No Qt, no llama_cpp.

A document that fits the context (with room for the summary and for questions) is not summarized with a
prompt of its own and then read again into the chat: the summary request is the conversation's first turn,
``[system: ASK_WHOLE + document][user: summary request]``, generated on the chat's sequence. What the engine
holds afterwards (document, request, summary) is exactly the head of every follow-up prompt, and it is saved
with the KV store under ``document_owner(sha)``: a follow-up, a reopened summary or a second summary of the
same file restore it from disk instead of reading the document again.

Rules of use:
- Runs on the engine lane (the thread that runs the job); ``PrefixReading.stop()`` from any thread.
- Tokens read are the engine's own figures: a reply's ``prompt_tokens - cached_tokens``, a prefill's
  ``decoded``. Nothing here estimates them.
- A stop keeps what was read: the sequence holds the prefix read so far and it is saved, so the next run
  restores it and reads only the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hisho.core.documents.model import Document
from hisho.core.engine.protocol import Progress, Sampling
from hisho.core.errors import EngineError

log = logging.getLogger("hisho.documents")

TICK_S = 0.5   # how often a reading in flight is reported (the engine writes progress every 0.1 s)

ASK_WHOLE = ("You answer questions about the documents below. Cite page or section references in brackets "
             "where you can. If the documents do not say, say so.")


def whole_system(docs: Sequence[Document]) -> str:
    """The system prompt of a conversation whose documents are read whole (and of its summary turn)."""
    return ASK_WHOLE + "".join(f"\n\n# {d.name}\n\n{d.text}" for d in docs)


def summary_request(names: str) -> str:
    """The first user message of a summary's conversation: also the prompt the summary is generated from."""
    return (f"Summarize {names}: a short overview paragraph, then bullet points with the key facts, names, "
            "numbers and conclusions, each with its page or section reference in brackets.")


def summary_turn(docs: Sequence[Document]) -> list[dict[str, str]]:
    names = ", ".join(d.name for d in docs)
    return [{"role": "system", "content": whole_system(docs)}, {"role": "user", "content": summary_request(names)}]


@dataclass
class Read:
    """What one reading cost and gave."""
    text: str = ""
    prompt_tokens: int = 0
    read: int = 0               # prompt tokens the engine read (the rest it held or restored)
    restored: int = 0           # tokens restored from disk before reading
    cancelled: bool = False


Tick = Callable[[Progress | None, float], None]   # (the engine's latest reading progress, seconds since start)


class Ticker:
    """Calls ``tick(progress, elapsed)`` every ``TICK_S`` while a request runs, with the stream's latest
    "progress" event (the stream's iterator records it; it yields only tokens). A thread of its own because
    the thread that iterates the stream is blocked until the first token; it ends with ``close()``."""

    def __init__(self, stream: Any, tick: Tick) -> None:
        self._stream = stream
        self._tick = tick
        self._done = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="hisho-reading-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(TICK_S):
            try:
                self._tick(getattr(self._stream, "progress", None), time.monotonic() - self._started)
            except Exception:  # a progress listener never fails the reading
                log.exception("reading progress listener failed")

    def close(self) -> None:
        self._done.set()
        self._thread.join(2.0)

    def __enter__(self) -> Ticker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PrefixReading:
    """One reading on the chat sequence (``seq`` 0) with the KV store: restore, read, save.

    ``kv`` is a ``KVSession`` (or None: an engine that keeps no KV state; then nothing is restored or saved)."""

    def __init__(self, engine: Any, kv: Any, owner: str) -> None:
        self.engine = engine
        self.kv = kv
        self.owner = owner
        self._stream: Any = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            if self._stream is not None:
                self._stream.cancel()

    def restore(self, tokens: list[int]) -> int:
        """Tokens of ``tokens`` the engine holds after looking in the KV store (0 without one)."""
        if self.kv is None:
            return 0
        try:
            report = self.kv.restore(self.owner, tokens)
        except EngineError as exc:
            log.info("document KV not restored: %s", exc)
            return 0
        return int(report.restored) if report.from_disk else 0

    def generate(self, messages: list[dict[str, str]], sampling: Sampling, tick: Tick | None = None,
                 on_token: Callable[[int], None] | None = None, saving: Callable[[], None] | None = None) -> Read:
        """Generate a reply to ``messages`` on the chat sequence, its prefix restored from disk where saved,
        then save the sequence (prompt and reply) for the questions that follow. A stop keeps what was read.
        ``tick`` reports the reading (``Ticker``), ``on_token(n)`` each token written, ``saving()`` the save."""
        tokens = list(self.engine.tokenize(messages=messages))
        out = Read(prompt_tokens=len(tokens), restored=self.restore(tokens))
        if self._stopped.is_set():
            out.cancelled = True
            return out
        with self._lock:
            stream = self._stream = self.engine.generate(tokens=tokens, sampling=sampling, seq=0)
        parts: list[str] = []
        try:
            with Ticker(stream, tick or (lambda _p, _s: None)):
                if self._stopped.is_set():
                    stream.cancel()
                for ev in stream:
                    parts.append(str(ev.get("text", "")))
                    if on_token is not None:
                        on_token(len(parts))
        finally:
            with self._lock:
                self._stream = None
        result = stream.result
        out.text = "".join(parts)
        if result is not None:
            out.read = int(result.prompt_tokens) - int(result.cached_tokens)
            out.cancelled = result.stop_reason == "cancelled"
            if out.cancelled and not parts:  # stopped inside the reading: the engine's last report of it
                progress = stream.progress
                out.read = min(out.read, progress.done if progress is not None else 0)
        if saving is not None and self.kv is not None:
            saving()
        self.save()
        return out

    def keep(self, messages: list[dict[str, str]]) -> Read:
        """Make the chat sequence hold ``messages`` (a conversation's prefix, no generation prompt): restored
        from disk where saved, only the rest read; then saved. Without ``PREFILL`` support, a one-token
        generate reads it."""
        tokens = list(self.engine.tokenize(messages=messages, add_generation_prompt=False))
        out = Read(prompt_tokens=len(tokens), restored=self.restore(tokens))
        try:
            res = self.engine.prefill(tokens, 0)
            out.read = int(res.get("decoded", len(tokens)))
            out.cancelled = not bool(res.get("complete", True))
        except EngineError as exc:  # an engine without the KV persistence ops: a one-token generate reads it
            log.info("prefill op unavailable (%s); reading with generate", exc)
            one = self.engine.generate(tokens=tokens, seq=0, sampling=Sampling(temperature=0.0, max_tokens=1))
            result = one.collect()
            out.read = int(result.prompt_tokens) - int(result.cached_tokens)
        self.save()
        return out

    def save(self) -> None:
        if self.kv is None:
            return
        try:
            self.kv.save(self.owner)
        except EngineError as exc:
            log.info("document KV not saved: %s", exc)
