"""Documents as a service of the composition root: summary jobs on the app's engine and store, the chat hook
that adds a long document's relevant parts to a question, opening a summary as a conversation, and documents
attached to an ordinary chat (``hisho.core.documents.attached``). No Qt.

Rules of use: made once by ``hisho.core.services.build``; the window and ``hisho summarize`` both call ``job``
(and the window ``open_result``) on a worker thread. ``before_prompt`` is installed on the chat service by the
root, in the order declared there, and ``prompt_context`` on its ``prompt_context``. A store that cannot hold the documents tables (read-only, too new) has no
attachments: chats go on without them.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from hisho.core.conversations.store import ConversationStore
from hisho.core.db import DatabaseUnavailable
from hisho.core.documents.ask import (
    DocumentContext,
    find_conversation,
    plan_chat,
    precompute_kv,
    record_given,
    save_conversation,
    summary_levels,
)
from hisho.core.documents.attached import AskPassword, ChatDocument, ChatDocuments, read_document
from hisho.core.documents.cache import SummaryCache
from hisho.core.documents.job import JobResult, SummaryJob
from hisho.core.documents.model import ReadingStopped
from hisho.core.documents.reading import PrefixReading
from hisho.core.engine.seam import Capability, Engine
from hisho.core.errors import UserError
from hisho.core.kv.session import KVSession, conversation_owner, document_owner

log = logging.getLogger("hisho.documents")
ReadProgress = Callable[[str, int, int], None]   # (file name, done, total) of one file's reading


class Documents:
    def __init__(self, store: ConversationStore, engine: Engine, kv: KVSession | None = None,
                 write: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        self.store = store
        self.engine = engine
        self.kv = kv
        self.write = write or (lambda fn: fn())  # where store writes run (the app: the executor's store lane)
        self._cache: SummaryCache | None = None
        self._chat: ChatDocuments | None = None
        self._open_lock = threading.RLock()  # cache() and chat_documents() are opened once, whichever lane asks first
        # Engine work under way, for the app's queue (the root sets it to ``AppState.working``; alone: nothing).
        self.working: Callable[[str], AbstractContextManager[object]] = lambda _what: nullcontext()

    def cache(self) -> SummaryCache:
        """The summary cache in the conversations database (raises DatabaseUnavailable if it cannot be)."""
        with self._open_lock:  # the store lane and the engine lane (prompt hooks) may both ask first
            if self._cache is None:
                self._cache = SummaryCache(self.store.db)
            return self._cache

    def chat_documents(self) -> ChatDocuments:
        """Documents attached to chats (raises DatabaseUnavailable if the database cannot hold them)."""
        with self._open_lock:
            if self._chat is None:
                self._chat = ChatDocuments(self.cache().db, self.engine.count_tokens, self.n_ctx)
            return self._chat

    def attach_to_chat(self, conversation_id: int, files: Sequence[Path], *, ask_password: AskPassword | None = None,
                       prompt: Callable[[int], list[dict[str, str]]] | None = None,
                       progress: ReadProgress | None = None, stop: Callable[[], bool] = lambda: False,
                       ) -> tuple[list[ChatDocument], list[str]]:
        """Read ``files`` and keep them with the chat (the engine lane: tokens are counted). Returns (documents
        attached, one line per file refused). With ``prompt`` (the chat service's ``prompt_messages``) and a
        KV session, a chat whose documents are read whole gets its prefix prefilled and saved now, so the
        first question prefills only itself. ``progress(name, done, total)`` reports each file's reading (PDF
        pages, a DOCX's body in bytes; (0, 0) when it starts, and when its tokens are being counted);
        ``stop()`` is asked between pages and blocks: True leaves the file, and those after it, unattached."""
        with self.working(f"reading {_names(files)}"):
            return self._attach(conversation_id, files, ask_password, prompt, progress, stop)

    def _attach(self, conversation_id: int, files: Sequence[Path], ask_password: AskPassword | None,
                prompt: Callable[[int], list[dict[str, str]]] | None, progress: ReadProgress | None,
                stop: Callable[[], bool]) -> tuple[list[ChatDocument], list[str]]:
        chat = self.chat_documents()
        added: list[ChatDocument] = []
        refused: list[str] = []
        for path in files:
            path = Path(path)
            try:
                doc = read_document(path, ask_password=ask_password, stop=stop,
                                    progress=_reading(path.name, progress, stop))
                if progress is not None:
                    progress(path.name, 0, 0)   # read; its tokens are counted now
                added.append(self.write(functools.partial(chat.add, conversation_id, doc)))
            except ReadingStopped as exc:
                log.info("attach stopped: %s", exc)
                refused.append(str(exc))
                break
            except UserError as exc:
                log.info("not attached: %s", exc)
                refused.append(str(exc))
        if added and not stop() and prompt is not None and self.kv is not None and self._keeps_kv() \
                and chat.approach(conversation_id) == "whole":
            precompute_kv(self.engine, prompt(conversation_id), self.kv, conversation_owner(conversation_id))
        return added, refused

    def detach(self, document_id: int) -> None:
        self.write(lambda: self.chat_documents().remove(document_id))

    def prompt_context(self, conversation_id: int, messages: list[dict[str, str]]) -> None:
        """ChatService ``prompt_context`` hook: attached documents short enough go in the system message."""
        try:
            chat = self.chat_documents()
        except DatabaseUnavailable:
            return
        chat.context(conversation_id, messages)

    def _keeps_kv(self) -> bool:
        """A prefix prefilled now is kept for the first question (the local engine); a remote server keeps its
        own prefix cache, so there is nothing to prefill here (docs/remote-engines.md)."""
        return Capability.PREFILL.value in self.engine.capabilities

    def n_ctx(self) -> int:
        """The context documents may use: the loaded one, within the one the model was trained on."""
        info = self.engine.load_info
        loaded, trained = int(info.get("n_ctx", 0)), int(info.get("n_ctx_train", 0) or 0)
        return min(loaded, trained) if trained > 0 else loaded

    def job(self, files: Sequence[Path | str], **options: Any) -> SummaryJob:
        """A summary job on the app's engine and cache (the model must be loaded). ``options``: SummaryJob's.
        A single document that fits is read once on the chat sequence, its KV kept with this KV session."""
        options.setdefault("kv", self.kv if self._keeps_kv() else None)
        options.setdefault("read_whole", self._keeps_kv())
        return SummaryJob(self.engine, files, cache=self.cache(), write=self.write, **options)

    def run(self, job: SummaryJob) -> JobResult:
        """Run ``job`` (the engine lane), shown in the app's queue while it runs."""
        with self.working(f"summarizing {_names(job.files)}"):
            return job.run()

    def open_result(self, result: JobResult) -> tuple[int | None, str]:
        """Open a finished job as a conversation with its documents attached. A document read whole keeps
        its KV under the document (``document_owner``): the chat sequence already holds it after the job, or
        it is restored from disk (a summary stored earlier); only what is missing is read. The first
        question then reads only itself, even after a restart. Returns (conversation id, a note on how
        questions are answered); ``result.tokens_read`` grows by what opening read."""
        if result.cancelled or not result.documents:
            return None, ""
        plan = result.chat
        if plan is None:  # a result the job did not size (made by hand): sized here the same way
            plan = plan_chat(result.extracted, summary_levels(result.summary), self.engine.count_tokens,
                             lambda m: self.engine.count_tokens(messages=m), self.n_ctx(), result.parts)
        att = plan.attachment
        db = self.cache().db
        # The same summary opened before (the same file summarized again): that chat, not a second one.
        cid = self.write(lambda: find_conversation(self.store, db, result.extracted, plan.summary)
                         or save_conversation(self.store, db, result.extracted, plan.summary, att))
        # The chat's prefix (system prompt and summary turn) is what the job left on the chat sequence and saved
        # under the document: restored (or found held), and only what is missing read.
        if self._keeps_kv():
            # The summary turn only: a chat opened again keeps its later turns under its own owner, restored on
            # its next send.
            kept = PrefixReading(self.engine, self.kv, document_owner(result.extracted[0].sha256)).keep(
                self.prompt_prefix(cid)[:len(plan.messages)])
            result.tokens_read += kept.read
            result.chat_open_read, result.chat_prefix_tokens = kept.read, kept.prompt_tokens
            log.info("conversation %s opened: %d prefix tokens, %d restored from disk, %d read", cid,
                     kept.prompt_tokens, kept.restored, kept.read)
        return cid, att.note

    def prompt_prefix(self, conversation_id: int) -> list[dict[str, str]]:
        """A conversation's messages as its prompts start (system prompt first, as the chat service builds
        them)."""
        conv = self.store.get(conversation_id)
        prefix = [{"role": "system", "content": conv.system_prompt}] if conv.system_prompt.strip() else []
        return prefix + [{"role": m.role, "content": m.content} for m in self.store.branch(conversation_id)]

    def before_prompt(self, turn: Any, messages: list[dict[str, str]]) -> None:
        """ChatService hook (the turn's worker): a long attached document gets its relevant parts added to the
        outgoing question (the stored message is unchanged)."""
        try:
            db = self.cache().db
        except DatabaseUnavailable as exc:
            log.info("no document attachments: %s", exc)
            return
        question = messages[-1]["content"] if messages and messages[-1].get("role") == "user" else ""
        summary = DocumentContext(db, self.engine.count_tokens, self.n_ctx).shape(turn, messages)
        attached = self.chat_documents().shape(turn, messages)
        if summary is not None or attached is not None:  # the answer's sources: the passages it was given
            given = (summary or []) + (attached or [])
            self.write(functools.partial(record_given, db, int(turn.conversation_id), question, given))



def _reading(name: str, progress: ReadProgress | None, stop: Callable[[], bool]) -> Callable[[int, int], None]:
    """``extract``'s per-page / per-block callback for one file: report, or stop the reading there."""
    if progress is not None:
        progress(name, 0, 0)

    def page(done: int, total: int) -> None:
        if stop():
            raise ReadingStopped(f"{name}: reading stopped")
        if progress is not None:
            progress(name, done, total)
    return page


def _names(files: Sequence[Path | str]) -> str:
    """"report.pdf", or "3 documents"."""
    return Path(files[0]).name if len(files) == 1 else f"{len(files)} documents"
