"""The composition root: the one place that makes the app's services and wires them together. No Qt.

``build(...)`` returns a ``Services``: settings, the conversation store, the engine, the executor (the app's
worker lanes), the chat service, KV persistence and documents. The window (``hisho.gui.shell.app``), ``hisho chat``,
``hisho summarize`` and ``hisho generate`` all get theirs here, so a chat resumes from its saved KV and a
question about a long document gets its relevant parts whichever front end sends it. Nothing else constructs
an ``EngineClient``, a ``KVSession`` or a ``ChatService`` for the app (benchmarks and tests may, to measure or
isolate one part).

Rules of use:
- The caller chooses only what differs between front ends: ``post`` (how callbacks reach its thread: the
  window's bridge, or nothing for the command line), ``n_seq_max`` (2 where KV saves need a scratch
  sequence), whether KV persistence is wanted, and ``strict`` (the CLI raises a bad model or a refused plan as
  a ``UserError``; the window opens anyway and shows it in a banner).
- The chat hooks and their order are declared in ``install_hooks`` and nowhere else.
- ``close()`` once at exit: KV saves in flight land, the lanes stop, the engine exits, the database closes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisho.core import settings as settings_mod
from hisho.core.conversations.chat import ChatService
from hisho.core.conversations.store import ConversationStore
from hisho.core.db import Database, DatabaseUnavailable, SchemaTooNew
from hisho.core.documents.service import Documents
from hisho.core.engine.launch import load_params_for, open_model
from hisho.core.engine.protocol import ErrorKind, LoadParams
from hisho.core.engine.seam import Capability, Engine
from hisho.core.errors import EngineCrashed, EngineError, UserError
from hisho.core.executor import Executor, Post
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.chat_hooks import attach as attach_kv
from hisho.core.planner.gate import PlanRefused

log = logging.getLogger("hisho.services")


@dataclass
class Services:
    settings: settings_mod.Settings
    store: ConversationStore
    engine: Engine
    executor: Executor
    chat: ChatService
    documents: Documents
    kv: KVChat | None                    # None: read-only store, or an engine that cannot keep KV state
    model_path: Path | None
    load_params: LoadParams | None       # None: no model could be chosen (``model_problem`` says why)
    problem: str = ""                    # why conversations are read-only / not saved (a banner in the window)
    model_problem: str = ""
    plan_refused: bool = False
    local_engine: Engine | None = None   # the built-in engine, kept while a remote one answers (use_engine)

    def load(self, params: LoadParams | None = None) -> dict[str, Any]:
        """Load ``params`` (default: the planned ones) into the engine; a file the engine cannot load is the
        user's to fix (UserError), whatever the engine's own error says."""
        params = params or self.load_params
        if params is None:
            raise UserError(self.model_problem or "no model to load")
        return load_engine(self.engine, params)

    def close(self, timeout: float = 30.0) -> None:
        """App exit: KV saves in flight land and are indexed, the lanes stop, the engine exits, the store
        closes. Safe to call twice."""
        if self.kv is not None:
            self.kv.close(timeout)
        self.executor.shutdown(timeout)
        self.engine.close()
        if self.local_engine is not None and self.local_engine is not self.engine:
            self.local_engine.close()
        self.store.close()


def load_engine(engine: Engine, params: LoadParams) -> dict[str, Any]:
    try:
        return engine.load(params)
    except EngineCrashed as exc:
        raise UserError(f"the engine crashed while loading {params.model_path}; the file is probably damaged "
                        f"({exc})") from None
    except EngineError as exc:
        if exc.kind is ErrorKind.MODEL_LOAD:
            raise UserError(str(exc)) from None
        raise


def open_store(path: Path | None = None) -> tuple[ConversationStore, str]:
    """The user's store, or a read-only / temporary one with a message saying why (opening never fails)."""
    try:
        return ConversationStore(Database(path)), ""
    except DatabaseUnavailable as exc:
        problem, too_new = str(exc), isinstance(exc, SchemaTooNew)
        log.error("conversation database unavailable: %s", problem)
    if not too_new:
        try:
            store = ConversationStore(Database(path, read_only=True))
            return store, f"{problem}. Showing your chats read-only; new messages are not saved."
        except DatabaseUnavailable as exc2:
            log.error("read-only open failed too: %s", exc2)
    return ConversationStore(Database(":memory:")), f"{problem}. Starting with an empty chat list; " \
                                                     "nothing is saved this session."


def make_engine() -> Engine:
    """The engine the app runs on: the local child process (the one implementation so far)."""
    from hisho.core.engine.client import EngineClient

    return EngineClient()


def install_hooks(chat: ChatService, documents: Documents, kv: KVChat | None) -> None:
    """The chat service's hooks, in the order they run. Declared here only.

    before the prompt goes to the engine (the turn's worker thread):
      1. documents: a long attached document's relevant parts are added to the outgoing question — this
         changes the prompt, so it comes first;
      2. kv: the saved KV of that final prompt is restored (it tokenizes exactly what the engine will see).
    after the reply is saved:
      1. kv: the sequence is saved for the next turn.
    wherever a chat's prompt is built (prompt_context): documents attached to the chat that fit go in its
    system message.
    """
    chat.before_prompt[:] = [documents.before_prompt]
    chat.prompt_context[:] = [documents.prompt_context]
    chat.after_turn[:] = []
    if kv is not None:
        chat.before_prompt.append(kv.before_prompt)
        chat.after_turn.append(kv.after_turn)


def build(model: str | None = None, *, db_path: Path | None = None, post: Post | None = None,
          n_ctx: int | None = None, n_seq_max: int = 2, kv: bool = True, strict: bool = False,
          override: bool = False, engine: Engine | None = None,
          settings: settings_mod.Settings | None = None, kv_unified: bool = True) -> Services:
    """Make and wire every service. ``model``: a store name or path (None: the settings' default model)."""
    settings = settings or settings_mod.load()
    store, problem = open_store(db_path)
    model_problem, plan_refused = "", False
    model_path: Path | None = None
    params: LoadParams | None = None
    try:
        model_path = open_model(model or str(settings["default_model"] or "") or None)
        params = load_params_for(model_path, n_ctx=n_ctx, settings=settings, n_seq_max=n_seq_max,
                                 override=override, kv_unified=kv_unified)
    except UserError as exc:
        if strict:
            store.close()
            raise
        model_problem, plan_refused = str(exc), isinstance(exc, PlanRefused)
    engine = engine or make_engine()
    executor = Executor(post)
    chat = ChatService(store, engine, model_name=model_path.stem if model_path else "",
                       write=lambda fn: executor.call("store", fn),
                       default_system_prompt=lambda: str(settings["default_system_prompt"]))
    kv_chat = None
    if kv and not store.read_only and Capability.KV_STATE.value in engine.capabilities:
        kv_chat = attach_kv(chat, store.db, executor, budget_bytes=int(settings["kv_disk_budget_bytes"]))
    documents = Documents(store, engine, kv_chat.session if kv_chat else None,
                          write=lambda fn: executor.call("store", fn))
    install_hooks(chat, documents, kv_chat)
    return Services(settings, store, engine, executor, chat, documents, kv_chat, model_path, params, problem,
                    model_problem, plan_refused, local_engine=engine)


def use_engine(services: Services, engine: Engine, model_name: str) -> None:
    """Answer from now on with ``engine`` (a remote one, or ``services.local_engine`` again). Call on the
    ``engine`` lane between turns. KV persistence follows the engine's capabilities: a remote server keeps its
    own cache (docs/remote-engines.md), so the local KV hooks step aside while it answers."""
    services.engine = engine
    services.chat.engine = engine
    services.chat.model_name = model_name
    services.documents.engine = engine
    kv = services.kv if Capability.KV_STATE.value in engine.capabilities else None
    install_hooks(services.chat, services.documents, kv)
