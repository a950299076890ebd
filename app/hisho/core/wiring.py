"""How the composition root's services are wired together. No Qt.

Rules of use: called by ``hisho.core.services`` only (the root), which re-exports these names.
- ``install_hooks`` declares the chat hooks and their order, here and nowhere else.
- ``use_engine`` hands the chat, documents and hooks another engine (a remote one, or the local one again).
- ``record_speed`` is the after-turn hook that keeps what a reply measured (the app's state, and the planner's
  speeds for a local model's file).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from hisho.core.appstate import AppState
from hisho.core.conversations.chat import ChatService, TurnResult
from hisho.core.documents.service import Documents
from hisho.core.engine.seam import Capability, Engine
from hisho.core.errors import UserError
from hisho.core.kv.chat_hooks import KVChat

log = logging.getLogger("hisho.services")


class Wired(Protocol):
    """What the wiring reads and sets of the composition root (``core/services.py:Services``, which passes
    itself): the wiring sits below the root and never imports it."""

    engine: Engine
    local_engine: Engine | None
    chat: ChatService
    documents: Documents
    kv: KVChat | None
    model_path: Path | None
    state: AppState


def install_hooks(chat: ChatService, documents: Documents, kv: KVChat | None,
                  measured: Callable[[TurnResult], None] | None = None) -> None:
    """The chat service's hooks, in the order they run. Declared here only.

    while the turn's prompt is built (the turn's worker thread, ``before_prompt``):
      1. documents: a long attached document's relevant parts are added to the outgoing question — this
         changes the prompt, so it runs before the prompt is tokenized;
    once the prompt is tokenized, before the reply (``restore_prompt``):
      1. kv: the saved KV of those exact tokens is restored (the engine then generates from the same tokens).
    after the reply is saved:
      1. kv: the sequence is saved for the next turn;
      2. measured: a local model's reply speeds are kept (planner.speed: measured beats predicted).
    wherever a chat's prompt is built (prompt_context): documents attached to the chat that fit go in its
    system message.
    """
    chat.before_prompt[:] = [documents.before_prompt]
    chat.prompt_context[:] = [documents.prompt_context]
    chat.restore_prompt[:] = []
    chat.after_turn[:] = []
    if kv is not None:
        chat.restore_prompt.append(kv.restore)
        chat.after_turn.append(kv.after_turn)
    if measured is not None:
        chat.after_turn.append(measured)


def record_speed(services: Wired, out: TurnResult) -> None:
    """An ``after_turn`` hook: what the reply measured, in the app's state (any engine) and kept for the local
    model's file (never a remote one's)."""
    from hisho.core.models.gguf_facts import read_facts
    from hisho.core.planner import speed

    r = out.engine
    if r is None or out.error:
        return
    services.state.measured(r.tokens_per_s, r.ttft_s)
    if services.model_path is None or services.engine is not services.local_engine:
        return
    try:
        speed.observe(read_facts(services.model_path), prompt_tokens=r.prompt_tokens, cached_tokens=r.cached_tokens,
                      completion_tokens=r.completion_tokens, ttft_s=r.ttft_s, tokens_per_s=r.tokens_per_s)
    except (UserError, OSError) as exc:  # a speed not kept never fails a turn
        log.warning("reply speed not kept: %s", exc)


def use_engine(services: Wired, engine: Engine) -> None:
    """Answer from now on with ``engine`` (a remote one, or ``services.local_engine`` again). Call on the
    ``engine`` lane between turns. KV persistence follows the engine's capabilities: a remote server keeps its
    own cache (docs/remote-engines.md), so the local KV hooks step aside while it answers."""
    services.engine = engine
    services.chat.engine = engine
    services.documents.engine = engine
    kv = services.kv if Capability.KV_STATE.value in engine.capabilities else None
    install_hooks(services.chat, services.documents, kv, measured=functools.partial(record_speed, services))
