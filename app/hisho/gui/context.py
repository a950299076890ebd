"""What the window works on: the store, the engine, the chat service and the workers, made once by the app.

Opening the store never crashes the app: a corrupt, locked or too-new database is reported in ``problem`` and
the window gets a read-only view of it when possible, else an empty temporary store (nothing is written to
the user's file in either case).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from hisho.core import settings as settings_mod
from hisho.core.chat import ChatService
from hisho.core.conversations import ConversationStore
from hisho.core.db import Database, DatabaseUnavailable, SchemaTooNew
from hisho.core.engine_client import EngineClient
from hisho.core.errors import UserError
from hisho.core.kv_chat import attach as attach_kv
from hisho.core.launch import load_params_for, open_model
from hisho.core.planner.gate import PlanRefused
from hisho.core.protocol import LoadParams
from hisho.gui.bridge import Bridge, Workers

log = logging.getLogger("hisho.gui")


@dataclass
class AppContext:
    store: ConversationStore
    engine: EngineClient
    service: ChatService
    bridge: Bridge
    workers: Workers
    model_path: Path | None
    load_params: LoadParams | None
    settings: settings_mod.Settings
    problem: str = ""                       # shown in a banner: why conversations are read-only / not saved
    model_problem: str = ""
    plan_refused: bool = False
    extras: dict[str, object] = field(default_factory=dict)


def open_store(path: Path | None = None) -> tuple[ConversationStore, str]:
    """The user's store, or a read-only / temporary one with a message saying why."""
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


def build(model: str | None, *, bridge: Bridge, db_path: Path | None = None) -> AppContext:
    settings = settings_mod.load()
    store, problem = open_store(db_path)
    model_problem = ""
    plan_refused = False
    model_path: Path | None = None
    params: LoadParams | None = None
    try:
        model_path = open_model(model or settings["default_model"] or None)
        params = load_params_for(model_path, settings=settings, n_seq_max=2)  # KV saves use the 2nd as scratch
    except UserError as exc:
        model_problem = str(exc)
        plan_refused = isinstance(exc, PlanRefused)
    engine = EngineClient()
    service = ChatService(store, engine, model_name=model_path.stem if model_path else "")
    workers = Workers(bridge)
    ctx = AppContext(store, engine, service, bridge, workers, model_path, params, settings, problem, model_problem,
                     plan_refused=plan_refused)
    kv = None if store.read_only else attach_kv(service, store.db)  # KV persistence: docs/kv-format.md
    if kv is not None:
        ctx.extras.update(kv=kv, kv_session=kv.session)
    return ctx
