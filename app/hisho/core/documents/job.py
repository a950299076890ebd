"""A summary job: extract → plan → map (batched, cached) → reduce until one summary. No Qt, no llama_cpp.

Rules of use:
- The model must already be loaded in ``client``; the job reads its ``n_ctx`` from the load info. Every batch runs
  in a job context the engine swaps in for it (one KV stream per sequence, ``Runtime.job_context``) whose
  ``n_parallel × cells`` never exceeds that ``n_ctx``: the job uses the memory the plan gave the chat context, and
  what the chat context held in RAM is dropped (KV persistence restores it from disk).
- ``run()`` blocks; call it on a worker thread in the GUI. ``cancel()`` may be called from any thread: the
  engine stops at its next decode step and ``run()`` returns with ``cancelled`` set. Finished chunks are already
  stored, so the next run of the same file resumes.
- ``on_progress`` gets a ``JobProgress`` from the thread running the job; the GUI marshals it itself.
- Nothing is left out silently: files that could not be read and content that was not read (image-only pages,
  embedded pictures) are listed at the end of the summary.
- A document estimated at more than ``CONFIRM_CHUNKS`` chunks is only started if ``confirm(name, chunks, eta_s)``
  says yes (the CLI asks or takes ``--yes``, the window asks); otherwise it is skipped with the estimate, before
  any token is counted (a 50 MB text file is ~16,000 chunks, days on a laptop).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisho.core.documents import plan as P
from hisho.core.documents.ask import (
    BY_PART,
    PASSAGE_TOKENS,
    QUESTION_ROOM,
    ChatPlan,
    plan_chat,
    summary_levels,
    whole_attachment,
)
from hisho.core.documents.attached import read_document
from hisho.core.documents.cache import Key, SummaryCache, model_fingerprint
from hisho.core.documents.model import Document, DocumentError, PageSpan
from hisho.core.documents.progress import JobProgress as JobProgress
from hisho.core.documents.progress import MapMeter, WholeMeter
from hisho.core.documents.quality import advice, judge
from hisho.core.documents.reading import PrefixReading, Ticker, summary_turn
from hisho.core.documents.result import DocResult as DocResult
from hisho.core.documents.result import JobResult as JobResult
from hisho.core.documents.result import duration as duration
from hisho.core.documents.speeds import probe_speeds
from hisho.core.engine.ops import BatchGenerate, Prompt
from hisho.core.engine.protocol import Sampling
from hisho.core.engine.seam import Engine
from hisho.core.errors import UserError
from hisho.core.kv.session import document_owner
from hisho.core.machine import Budget, detect

log = logging.getLogger("hisho.documents")


AskPassword = Callable[[str, bool], str | None]  # (file name, last one was wrong) -> password, None to skip
Confirm = Callable[[str, int, float], bool]      # (file name, estimated chunks, ETA in seconds) -> go ahead
CONFIRM_CHUNKS = 200      # ~200K tokens, a 400-page book: about an hour on a 2-core laptop with the default model
CHARS_PER_TOKEN = 4       # a rough estimate, made before any token is counted


class Cancelled(Exception):
    pass


class TooLarge(DocumentError):
    """A document whose summary would take longer than anyone expects without being asked."""


class SummaryJob:
    def __init__(self, client: Engine, files: Sequence[Path | str], *, cache: SummaryCache | None = None,
                 password: str | None = None, max_parallel: int = P.MAX_PARALLEL,
                 summary_tokens: int = P.SUMMARY_TOKENS, final_tokens: int = P.FINAL_TOKENS,
                 chunk_target: int = P.CHUNK_TARGET,
                 on_progress: Callable[[JobProgress], None] | None = None, pages: PageSpan | None = None,
                 ask_password: AskPassword | None = None, confirm: Confirm | None = None,
                 write: Callable[[Callable[[], Any]], Any] | None = None, budget: Budget | None = None,
                 kv: Any = None, read_whole: bool = True) -> None:
        self.client = client
        self.files = [Path(f) for f in files]
        self.cache = cache or SummaryCache()
        self.password = password
        self.summary_tokens = summary_tokens
        self.final_tokens = final_tokens
        self.chunk_target = chunk_target
        self.on_progress = on_progress
        self.pages = pages                   # a cut the user asked for: only these pages of each PDF
        self.ask_password = ask_password
        self.write = write or (lambda fn: fn())  # where cache writes run (the app: its store lane)
        self.confirm = confirm
        self.budget = budget                 # the machine a better model is suggested for (None: detected)
        info = client.load_info
        # Chunks and prompts never go past the context the model was trained on, whatever context is loaded
        # (a planner may load 32K for a model trained on 8K): beyond it, attention is untrained.
        self.n_ctx_loaded = int(info.get("n_ctx", 0))
        trained = int(info.get("n_ctx_train", 0) or 0)
        self.n_ctx = min(self.n_ctx_loaded, trained) if trained > 0 else self.n_ctx_loaded
        self.context_note = "" if self.n_ctx == self.n_ctx_loaded else (
            f"The model was trained on {trained:,} tokens of context: documents are read in parts of at most "
            f"that, though {self.n_ctx_loaded:,} are loaded.")
        # A single document that fits is read once on the chat's sequence (``reading``), its KV kept by ``kv``
        # (a KVSession; None keeps nothing). ``read_whole`` False: the map prompts always (the bench).
        self.kv = kv
        self.read_whole = read_whole
        self._reading: PrefixReading | None = None
        self.tokens_read = 0
        self.document_tokens_read = 0
        self.plans: list[P.Plan] = []     # the map-reduce plans made (what the engine was given, for checks)
        self.max_parallel = max(1, max_parallel)
        if client.load_params is None:
            raise UserError("no model is loaded to summarize with")
        self.model_fp = model_fingerprint(client.load_params.model_path)
        self.prompt_version = f"{P.PROMPT_VERSION}/{summary_tokens}/{final_tokens}"
        self._cancel = threading.Event()
        self._stream: Any = None
        # Re-entrant: ``cancel`` also runs from a signal handler (the CLI's Ctrl+C), on the main thread, which may
        # be inside this lock sending the batch; a plain Lock deadlocked there.
        self._lock = threading.RLock()
        self._started = 0.0
        self.eta_s = 0.0

    # ----- control ----------------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()
        with self._lock:
            if self._stream is not None:
                self._stream.cancel()
            if self._reading is not None:
                self._reading.stop()

    def _report(self, stage: str, done: int, total: int, file: str = "", message: str = "",
                eta: float | None = None) -> None:
        if self.on_progress is not None:
            self.on_progress(JobProgress(stage, done, total, self.eta_s if eta is None else eta, file, message))

    def _page_progress(self, name: str) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            if self._cancel.is_set():
                raise Cancelled()
            where = f"page {done} of {total}" if name.lower().endswith(".pdf") else \
                f"{done * 100 // max(total, 1)} %"   # a DOCX reports the bytes of its body read
            self._report("extracting", done, total, name, f"reading {name}: {where}")
        return report

    # ----- the job ----------------------------------------------------------------------------------

    def run(self) -> JobResult:
        self._started = time.perf_counter()
        result = JobResult(summary="")
        try:
            docs = self._extract_all(result)
            if not docs:
                raise UserError("; ".join(result.skipped) or "no files given")
            for doc in docs:
                try:
                    self._check_size(doc)
                except TooLarge as exc:
                    result.skipped.append(str(exc))
                    continue
                result.extracted.append(doc)
                whole = self._whole_prompt(doc) if len(docs) == 1 else None
                if whole is not None:
                    result.chat_prompt = whole
                    result.documents.append(self._summarize_whole(doc, whole))
                else:
                    result.documents.append(self._summarize(doc, result.parts))
        except Cancelled:
            result.cancelled = True
        if self.context_note:
            log.warning("%s", self.context_note)
        result.eta_s = self.eta_s
        self._judge(result)
        result.summary = self._compose(result)
        try:
            self._prepare_chat(result)
        except Cancelled:
            result.cancelled = True
            result.summary = self._compose(result)
        result.tokens_read, result.n_ctx, result.context_note = self.tokens_read, self.n_ctx, self.context_note
        result.document_tokens_read = self.document_tokens_read
        result.seconds = time.perf_counter() - self._started
        self._report("cancelled" if result.cancelled else "done", 1, 1)
        return result

    def _prepare_chat(self, result: JobResult) -> None:
        """Size the chat the summary opens as (``ask.plan_chat``) and, with a KV session, make the chat
        sequence hold that chat's exact prefix and save it under the document: opening the summary as a chat
        then restores it instead of reading it. A document read whole already left its summary turn there."""
        if result.cancelled or not result.documents or not result.extracted:
            return

        def count_messages(messages: list[dict[str, str]]) -> int:
            return self.client.count_tokens(messages=messages)

        if result.chat_prompt:  # the summary turn was generated on this prefix: the chat is that turn
            messages = [*result.chat_prompt, {"role": "assistant", "content": result.summary}]
            result.chat = ChatPlan(whole_attachment(result.extracted), result.summary, messages,
                                   count_messages(messages))
            return
        plan = plan_chat(result.extracted, summary_levels(result.summary), self.client.count_tokens, count_messages,
                         self.n_ctx, result.parts)
        result.chat = plan
        if self.kv is None:
            return
        if self._cancel.is_set():
            raise Cancelled()
        name = result.extracted[0].name
        self._report("saving", 0, 1, name, "Saving for follow-up questions")
        reading = PrefixReading(self.client, self.kv, document_owner(result.extracted[0].sha256))
        kept = reading.keep(plan.messages)
        self.tokens_read += kept.read
        result.chat_prefix_read = kept.read
        log.info("summary chat prefix for %s: %d tokens, %d restored from disk, %d read", name,
                 kept.prompt_tokens, kept.restored, kept.read)

    def _extract_all(self, result: JobResult) -> list[Document]:
        docs: list[Document] = []
        for i, path in enumerate(self.files):
            self._report("extracting", i, len(self.files), path.name, f"reading {path.name}")
            try:
                docs.append(self._extract(path))
            except DocumentError as exc:
                result.skipped.append(str(exc))
        result.truncated = any(d.cut for d in docs)
        return docs

    def _extract(self, path: Path) -> Document:
        """Extract one file; an encrypted PDF asks ``ask_password`` (up to 3 tries) when there is one."""
        return read_document(path, self.password, self.ask_password, self._cancel.is_set,
                             progress=self._page_progress(path.name), pages=self.pages)

    def _check_size(self, doc: Document) -> None:
        """Ask before a job estimated at more than CONFIRM_CHUNKS chunks (TooLarge if not confirmed)."""
        tokens = doc.chars // CHARS_PER_TOKEN
        chunks = -(-tokens // max(1, self.chunk_target))
        if chunks <= CONFIRM_CHUNKS:
            return
        prefill, decode, gain = self.cache.speeds(self.model_fp) or self._probe_speeds()
        eta = tokens / max(prefill, 1e-3) + chunks * self.summary_tokens * 0.6 / max(decode * gain, 1e-3)
        log.info("%s: about %d chunks, ETA %.0fs: asking", doc.name, chunks, eta)
        if self.confirm is not None and self.confirm(doc.name, chunks, eta):
            return
        raise TooLarge(f"{doc.name}: about {chunks:,} chunks of {self.chunk_target} tokens, roughly "
                       f"{duration(eta)} on this machine; not started (confirm to run it)")

    def _judge(self, result: JobResult) -> None:
        """A warning naming a model that fits when a summary is copied text or repetition."""
        if all(d.quality.get("verdict", "ok") == "ok" for d in result.documents):
            return
        budget = self.budget if self.budget is not None else detect(probe_devices=False).budget()
        model = Path(self.client.load_params.model_path).stem if self.client.load_params else "loaded"
        from hisho.core.planner.speed import load_profile

        result.quality_warning, result.suggested_model = advice([d.quality for d in result.documents], model,
                                                                budget, load_profile())
        log.warning("summary quality: %s", [d.quality for d in result.documents])

    def _compose(self, result: JobResult) -> str:
        parts: list[str] = []
        several = len(result.documents) > 1
        for d in result.documents:
            parts.append(f"## {d.file}\n\n{d.summary.strip()}" if several else d.summary.strip())
        notes = [n for d in result.documents for n in d.notes] + [f"{s} — not summarized" for s in result.skipped]
        if result.cancelled:
            notes.append("the job was cancelled before it finished; run it again to resume")
        if result.quality_warning:
            # Kept on the summary itself (the window's notice goes away): after the generated text, so the
            # conversation's saved prefix still matches it token for token.
            parts.append(f"⚠ {result.quality_warning}")
        if notes:
            parts.append("Not included:\n" + "\n".join(f"- {n}" for n in notes))
        return "\n\n".join(p for p in parts if p)

    # ----- a document read once, on the prefix its conversation keeps --------------------------------------

    def _whole_prompt(self, doc: Document) -> list[dict[str, str]] | None:
        """The summary turn of ``doc`` when the document, its summary and room for questions fit the context
        (then it is read once, in the sequence the conversation keeps); None for the map-reduce path."""
        if not self.read_whole or doc.chars // CHARS_PER_TOKEN > self.n_ctx:  # surely too long: not tokenized
            return None
        self._report("planning", 0, 1, doc.name, f"counting tokens of {doc.name}")
        messages = summary_turn([doc])
        if self.client.count_tokens(messages=messages) + self.final_tokens + QUESTION_ROOM > self.n_ctx:
            return None
        return messages

    def _summarize_whole(self, doc: Document, messages: list[dict[str, str]]) -> DocResult:
        res = DocResult(doc.name, "", "whole", 1, 0, self._count(doc.text), 1, list(doc.notes))
        key = self._key(doc, 0, P.text_key("whole", *(m["content"] for m in messages)))
        hit = self.cache.get(key)
        if hit is not None:  # the summary is stored: opening it restores the document's KV from disk
            res.chunks_cached, res.summary = 1, hit
        else:
            res.summary = self._read_whole(doc, messages, key)
        res.quality = judge(res.summary, doc.text).to_dict()
        return res

    def _read_whole(self, doc: Document, messages: list[dict[str, str]], key: Key) -> str:
        """Read ``doc`` once on the chat sequence and write its summary there; the KV is saved for the
        questions that follow (a stop saves what was read, so the next run reads only the rest)."""
        reading = PrefixReading(self.client, self.kv, document_owner(doc.sha256))
        with self._lock:
            self._reading = reading
            if self._cancel.is_set():
                reading.stop()
        speeds = self.cache.speeds(self.model_fp) or self._probe_speeds()
        prompt_tokens = self.client.count_tokens(messages=messages)
        meter = WholeMeter(self._forward, doc, prompt_tokens, self.final_tokens, speeds[:2])
        self.eta_s = meter.eta(0, 0.0)
        meter.tick(None, 0.0)
        sampling = Sampling(temperature=0.0, repeat_penalty=1.1, max_tokens=self.final_tokens)
        try:
            read = reading.generate(messages, sampling, meter.tick, meter.token, meter.saving)
        finally:
            with self._lock:
                self._reading = None
        self.tokens_read += read.read
        # The document's own tokens among those read: the prompt is [head][document][request], and a stop or
        # a restore leaves a prefix held, so a complete reading ends with the request.
        tail = read.prompt_tokens - len(self.client.tokenize(messages=messages[:1], add_generation_prompt=False))
        self.document_tokens_read += max(0, min(read.read - tail, self._count(doc.text)))
        log.info("%s read once on the chat prefix: %d prompt tokens, %d read, %d restored", doc.name,
                 read.prompt_tokens, read.read, read.restored)
        if read.cancelled or self._cancel.is_set():
            raise Cancelled()
        text = read.text.strip()
        self.write(functools.partial(self.cache.put, key, 0, P.merge_refs([s.ref for s in doc.sections]), text,
                                     meter.written))
        return text

    def _forward(self, p: JobProgress) -> None:
        if p.eta_s > 0:
            self.eta_s = p.eta_s
        if self.on_progress is not None:
            self.on_progress(p)

    # ----- map-reduce -------------------------------------------------------------------------------------

    def _summarize(self, doc: Document, parts_out: list[tuple[str, str]]) -> DocResult:
        self._report("planning", 0, 1, doc.name, f"counting tokens of {doc.name}")
        overhead = self.client.count_tokens(messages=P.map_messages(doc.name, "pp. 000–000", ""))
        try:
            plan = P.make_plan(doc, self._count, self.n_ctx, overhead_tokens=overhead,
                               summary_tokens=self.summary_tokens, final_tokens=self.final_tokens,
                               max_parallel=self.max_parallel, chunk_target=self.chunk_target)
        except ValueError as exc:
            raise UserError(f"{doc.name}: {exc}") from None
        self.plans.append(plan)
        self.eta_s = self._estimate(plan)
        log.info("plan for %s: %s, ETA %.0fs", doc.name, plan.as_dict(), self.eta_s)
        res = DocResult(doc.name, "", plan.mode, len(plan.chunks), 0, plan.input_tokens, plan.n_parallel,
                        list(doc.notes))
        # Questions get passages of ~PASSAGE_TOKENS (pages, or parts of a long one), not the map's chunks: a
        # follow-up then reads a few pages of the document again, not half the context (docs/summarization.md).
        parts_out.extend((f"{doc.name}, {c.refs}", c.text)
                         for c in P.pack_sections(doc.sections, self._count, PASSAGE_TOKENS))
        if plan.mode == "single":
            chunk = plan.chunks[0]
            msgs = P.single_messages(doc.name, chunk.text)
            done = self._cached_or_run(doc, 0, [(chunk.key, chunk.index, chunk.refs, msgs)], self.final_tokens,
                                       1, "summarizing", overhead + chunk.tokens + self.final_tokens)
            res.chunks_cached = done.cached
            self.document_tokens_read += chunk.tokens * len(done.generated)
            res.summary = done.texts[0]
            res.quality = judge(res.summary, doc.text).to_dict()
            return res
        items = [(c.key, c.index, c.refs, P.map_messages(doc.name, c.refs, c.text)) for c in plan.chunks]
        mapped = self._cached_or_run(doc, 0, items, self.summary_tokens, plan.n_parallel, "summarizing",
                                     overhead + max(c.tokens for c in plan.chunks) + self.summary_tokens)
        res.chunks_cached = mapped.cached
        self.document_tokens_read += sum(plan.chunks[i].tokens for i in mapped.generated)
        parts = [(c.refs, t.strip()) for c, t in zip(plan.chunks, mapped.texts)]
        final, by_part = self._reduce(doc, parts, overhead)
        res.quality = judge(final, doc.text).to_dict()
        # The combined text of a small model may drop the references; the parts it was made from keep them, so
        # the result always points to pages/sections.
        res.summary = final + BY_PART + "\n".join(f"- [{ref}] {_first_lines(t)}" for ref, t in by_part)
        return res

    def _reduce(self, doc: Document, parts: list[tuple[str, str]],
                overhead: int) -> tuple[str, list[tuple[str, str]]]:
        """Combine (refs, summary) parts in rounds until one remains; every round is cached like the map phase.
        Returns the final text and the parts of the round before it (the most detailed list that is short)."""
        budget = self.n_ctx - overhead - self.final_tokens
        level = 1
        previous = parts
        while len(parts) > 1:
            texts = [f"[{ref}] {t}" for ref, t in parts]
            groups = P.reduce_groups(texts, self._count, budget)
            final = len(groups) == 1
            refs, start = [], 0
            for g in groups:
                refs.append(P.merge_refs([r for r, _ in parts[start:start + len(g)]]))
                start += len(g)
            items = [(P.text_key(*g), i, refs[i], P.reduce_messages(doc.name, g)) for i, g in enumerate(groups)]
            per_seq = overhead + budget + self.final_tokens
            n_par = max(1, min(self.max_parallel, self.n_ctx // P.seq_cells(per_seq), len(groups)))
            out = self._cached_or_run(doc, level, items, self.final_tokens if final else self.summary_tokens,
                                      n_par, "combining", per_seq)
            previous = parts
            parts = [(r, t.strip()) for r, t in zip(refs, out.texts)]
            level += 1
        return parts[0][1], previous

    def _count(self, text: str) -> int:
        if self._cancel.is_set():
            raise Cancelled()
        return self.client.count_tokens(text)

    # ----- running items ------------------------------------------------------------------------------

    @dataclass
    class _Done:
        texts: list[str]
        cached: int
        generated: list[int]      # positions of the items read and generated now (not from the cache)

    def _cached_or_run(self, doc: Document, level: int, items: list[tuple[str, int, str, P.Messages]],
                       max_tokens: int, n_parallel: int, stage: str, cells: int) -> SummaryJob._Done:
        """Summaries for ``items`` (key, index, refs, messages): from the cache where stored, else generated in
        one batched request; each result is stored as soon as it arrives."""
        texts: list[str | None] = []
        todo: list[int] = []
        for pos, (key, _index, _refs, _msgs) in enumerate(items):
            hit = self.cache.get(self._key(doc, level, key))
            texts.append(hit)
            if hit is None:
                todo.append(pos)
        total, cached = len(items), len(items) - len(todo)
        label = "chunk" if stage == "summarizing" else "combine step"
        self._report(stage, cached, total, doc.name, f"{label} {cached} of {total}")
        if todo:
            self._generate(doc, level, items, todo, texts, max_tokens, n_parallel, stage, label, cells)
        return SummaryJob._Done([t or "" for t in texts], cached, todo)

    def _generate(self, doc: Document, level: int, items: list[tuple[str, int, str, P.Messages]],
                  todo: list[int], texts: list[str | None], max_tokens: int, n_parallel: int, stage: str,
                  label: str, cells: int) -> None:
        if self._cancel.is_set():
            raise Cancelled()
        sampling = Sampling(temperature=0.0, repeat_penalty=1.1, max_tokens=max_tokens)
        request = BatchGenerate(items=[Prompt(messages=items[p][3], max_tokens=max_tokens).to_wire() for p in todo],
                                sampling=sampling, n_parallel=n_parallel, n_ctx_per_seq=P.seq_cells(cells))
        started = time.perf_counter()
        with self._lock:
            stream = self._stream = self.client.batch(request)
            if self._cancel.is_set():  # a cancel that came while the batch was being sent had no stream to stop
                stream.cancel()
        finished = len(items) - len(todo)
        meter = MapMeter(self._forward, stage, doc.name, label, finished, len(items), max_tokens, self.eta_s)
        try:
            with Ticker(stream, meter.tick):
                for ev in stream:
                    pos = todo[int(ev["item"])]
                    key, index, refs, _ = items[pos]
                    texts[pos] = str(ev["text"])
                    self.write(functools.partial(self.cache.put, self._key(doc, level, key), index, refs,
                                                 texts[pos] or "", int(ev.get("completion_tokens", 0))))
                    finished += 1
                    rate = (time.perf_counter() - started) / (finished - (len(items) - len(todo)))
                    meter.item_done(finished, rate * (len(items) - finished))
        finally:
            with self._lock:
                self._stream = None
            if stream.result is not None:
                self.tokens_read += int(stream.result.extra.get("prefill_tokens", 0))
        if self._cancel.is_set() or any(t is None for t in texts):
            raise Cancelled()

    def _key(self, doc: Document, level: int, chunk_key: str) -> Key:
        return Key(doc.sha256, level, chunk_key, self.model_fp, self.prompt_version)

    # ----- ETA -----------------------------------------------------------------------------------------

    def _estimate(self, plan: P.Plan) -> float:
        speeds = self.cache.speeds(self.model_fp) or self._probe_speeds()
        prefill, decode, gain = speeds
        return P.estimate_seconds(plan, prefill, decode, gain if plan.n_parallel > 1 else 1.0,
                                  self.summary_tokens)

    def _probe_speeds(self) -> tuple[float, float, float]:
        return probe_speeds(self.client, self.cache, self.model_fp, self.write)


def _first_lines(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + " …"
