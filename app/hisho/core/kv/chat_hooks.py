"""KV persistence wired to the chat service: restore on send, save after a turn, prefetch, type-ahead. No Qt.

Its ``restore`` / ``after_turn`` are hooks of ``hisho.core.conversations.chat.ChatService``; the composition root
installs them (``hisho.core.wiring.install_hooks``, which declares their order). The window calls
``selected(cid)``, ``draft(cid, text)`` and ``deleted(cid)`` from its signals; those only queue work on the
executor's lanes (engine for prefetch and type-ahead, store for the index) and return at once (safe on the GUI
thread).

Why it is always safe: chunks are keyed by the exact tokens they hold, and the engine compares tokens before
reusing anything, so whatever order prefetch, type-ahead, sends and saves reach the engine in, the worst case is
a slower reply, never a wrong one.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hisho.core import instance
from hisho.core.db import Database, DatabaseUnavailable
from hisho.core.errors import EngineError
from hisho.core.executor import Executor
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import (
    KVSession,
    RestoreReport,
    conversation_owner,
    next_turn_prefix,
    suffix_length,
)
from hisho.core.kv.usage import Usage

log = logging.getLogger("hisho.kv")


def attach(service: Any, db: Database, executor: Executor | None = None,
           budget_bytes: int | None = None) -> KVChat | None:
    """The app's KV persistence on the conversations database for ``service`` (whose engine it uses), hooks
    not yet installed. Returns None, with a log line, when the database cannot hold the index (read-only, too
    new): chats then work as before, only without resuming from disk. The index is repaired in the
    background."""
    try:
        index = KVIndex(db)
    except DatabaseUnavailable as exc:
        log.warning("KV persistence off: %s", exc)
        return None
    session = KVSession(service.engine, index, executor=executor, budget_bytes=budget_bytes)
    # Holding the data folder's lock, nothing else can be saving: chunks a killed client left go at once.
    session.submit(lambda: index.reconcile(alone=instance.held()))
    return KVChat(service, session)


class KVChat:
    """Glue between one ``ChatService`` and one ``KVSession`` (which must wrap the service's engine)."""

    def __init__(self, service: Any, session: KVSession) -> None:
        self.service = service
        self.session = session
        self._busy: set[int] = set()  # conversations with a turn in flight: no type-ahead there
        self._lock = threading.Lock()
        self._suffix: dict[str, int] = {}
        self.last_restore: RestoreReport | None = None  # what the last send found (for the status bar)
        self._held: dict[int, str] = {}  # chat id -> a draft whose reading the user stopped: not read again

    def install(self) -> KVChat:
        """Add the hooks to the chat service (tests; the app's root declares them in ``install_hooks``)."""
        self.service.restore_prompt.append(self.restore)
        self.service.after_turn.append(self.after_turn)
        return self

    # ----- chat service hooks (the turn's worker thread) -------------------------------------------------

    def restore(self, turn: Any, prompt: Any) -> None:
        """Before the reply: restore the chat's saved KV for the prompt's tokens (``ChatService``'s prepared
        prompt, tokenized once for the turn; a prompt without tokens is tokenized here)."""
        with self._lock:
            self._busy.add(turn.conversation_id)
        try:
            tokens = prompt.tokens if prompt.tokens is not None else \
                self.session.engine.tokenize(messages=prompt.messages, tools=self._tools())
            report = self.session.restore(conversation_owner(turn.conversation_id), tokens)
            self.last_restore = report
            if report.restored:
                log.info("conversation %s: %d tokens from %s (%.3fs)", turn.conversation_id, report.restored,
                         "memory" if report.skipped else "disk", report.seconds)
        except EngineError as exc:
            log.info("KV restore skipped: %s", exc)  # the send itself reports engine trouble
        except Exception:
            log.exception("KV restore failed; the prompt is prefilled instead")  # a cache never fails a send

    def after_turn(self, result: Any) -> None:
        cid = result.turn.conversation_id
        with self._lock:
            self._busy.discard(cid)
        figures = getattr(result, "engine", None)  # the engine's: its ttft_s is the prefill and one token
        if result.error:
            return
        if figures is not None and figures.stop_reason == "cancelled" and figures.completion_tokens == 0:
            return  # stopped while the prompt was read: saving would read the rest of it, what Stop refused
        try:
            self._close_turn(cid)
            pinned = bool(self.service.store.get(cid).pinned)
            self.session.save(conversation_owner(cid), pinned=pinned)
            if figures is not None and figures.ttft_s > 0:  # measured prefill speed, for "seconds saved"
                self.session.record_prefill(int(figures.prompt_tokens) - int(figures.cached_tokens),
                                            float(figures.ttft_s))
        except EngineError as exc:
            log.info("KV save skipped: %s", exc)
        except Exception:
            log.exception("KV save failed")

    # ----- window events (any thread; work goes to the executor's lanes) ---------------------------------

    def selected(self, cid: int) -> None:
        """A conversation was opened: restore its saved prefix now, before the user has finished typing."""
        self.session.submit(lambda: self._prefetch(cid), lane="engine")

    def draft(self, cid: int, text: str) -> None:
        """The unsent text changed: prefill it (type-ahead)."""
        with self._lock:
            if self._held.get(cid) == text:
                return  # the user stopped reading this very text: only an edit starts it again
            self._held.pop(cid, None)
        if text.strip():  # latest wins: a keystroke replaces the previous one's job if it has not started
            self.session.executor.submit("engine", lambda: self.session.quietly(self._draft, cid, text),
                                         key=f"kv-draft-{id(self)}")

    def hold_draft(self, cid: int, text: str) -> None:
        """The user stopped the send of ``text`` while the engine read it: drop type-ahead jobs not started
        yet, and do not read that same text again until it changes (GUI thread; returns at once)."""
        with self._lock:
            self._held[cid] = text
        self.session.executor.submit("engine", lambda: None, key=f"kv-draft-{id(self)}")
        self.session.drop_drafts()

    def pinned(self, cid: int, pinned: bool) -> None:
        """Pinned conversations are evicted last when the KV disk budget is exceeded."""
        def pin() -> None:
            self.session.index.set_pinned(conversation_owner(cid), pinned)
            self.session.changed()
        self.session.submit(pin)

    def deleted(self, cid: int) -> None:
        self.session.submit(lambda: self.session.delete(conversation_owner(cid)))

    def usage(self, cid: int) -> Usage:
        return self.session.usage(conversation_owner(cid))

    def close(self, timeout: float = 30.0) -> None:
        """App exit: wait for saves in flight to be written and indexed."""
        self.session.close(timeout)

    def _close_turn(self, cid: int) -> None:
        """Append what every next prompt starts with (end of the reply's turn + the next user header) to the
        sequence before it is saved, so a resumed send prefills only the user's words and the assistant header
        (at 4K tokens of context each prompt token costs ~15 ms here: attention over the whole cache)."""
        engine = self.session.engine
        history = self.service.prompt_messages(cid)
        if not history:
            return
        tools = self._tools()
        head = next_turn_prefix(lambda t: list(engine.tokenize(messages=[*history, {"role": "user", "content": t}],
                                                               tools=tools)))
        if head:
            try:
                engine.prefill(head, self.session.seq)
            except EngineError as exc:  # e.g. the context is full: save what the sequence holds
                log.info("next-turn header not prefilled: %s", exc)

    def _tools(self) -> list[dict[str, Any]] | None:
        """The tools the chat's prompts carry (the tool loop's), so every render here matches the reply's."""
        tools = getattr(self.service, "prompt_tools", None)
        return tools() if callable(tools) else None

    # ----- worker side -----------------------------------------------------------------------------------

    def _prefetch(self, cid: int) -> None:
        messages = self.service.prompt_messages(cid)
        if not messages:
            return
        engine = self.session.engine
        tokens = engine.tokenize(messages=messages, add_generation_prompt=False, tools=self._tools())
        self.session.restore(conversation_owner(cid), tokens)

    def _draft(self, cid: int, text: str) -> None:
        with self._lock:
            if cid in self._busy:
                return
        engine = self.session.engine
        messages = self.service.prompt_messages(cid, extra_user=text)
        fp = self.session.fingerprint()
        tools = self._tools()
        if fp not in self._suffix:
            history = messages[:-1]
            self._suffix[fp] = suffix_length(
                lambda t: list(engine.tokenize(messages=[*history, {"role": "user", "content": t}], tools=tools)))
        self.session.draft(engine.tokenize(messages=messages, tools=tools), self._suffix[fp])
