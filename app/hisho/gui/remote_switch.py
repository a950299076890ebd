"""Choosing which engine answers: the local one or a model on a remote server (docs/remote-engines.md).

Rules of use: GUI thread. Probing servers runs on the ``remote`` lane (network waits never hold the engine or
the store lane); switching runs on the ``engine`` lane, between turns, through ``services.use_engine``. A
server that does not answer is left out of the picker and said in one line; nothing blocks the window.
"""

from __future__ import annotations

import logging
from typing import Any

from hisho.core import services as services_mod
from hisho.core.protocol import LoadParams
from hisho.core.remote.endpoints import load_endpoints, with_key
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint
from hisho.core.remote.probe import ServerInfo, probe

log = logging.getLogger("hisho.gui")


def reachable() -> list[tuple[Endpoint, ServerInfo]]:
    """Every configured engine that answers now, with its models (``remote`` lane)."""
    out = []
    for ep in load_endpoints():
        info = probe(with_key(ep), timeout=3.0)
        if info.ok:
            out.append((ep, info))
    return out


def current_engine_name(window: Any) -> str:
    return str(window.ctx.engine.engine_info.get("engine") or "local")


def use_remote(window: Any, ep: Endpoint, model: str) -> None:
    """Answer from ``model`` on ``ep`` from the next message on."""
    ctx, c = window.ctx, window.controller

    def job() -> dict[str, Any]:
        eng = RemoteEngine(with_key(ep))
        eng.on_wait = lambda name: ctx.executor.post(lambda: c.toast(f"waiting for {name}…"))
        info = eng.load(LoadParams(model_path=model, n_ctx=int(ctx.settings["n_ctx"])))
        services_mod.use_engine(ctx, eng, model)
        return info

    def done(info: dict[str, Any]) -> None:
        n_ctx = int(info.get("n_ctx", 0))
        window.model_label.setText(f"{model} · {ep.name}")
        window.status.set_model(f"{model} on {ep.name}", n_ctx)
        window.empty_subtitle.setText(f"Chatting with {model}, running on {ep.name} ({ep.root}).")
        resume = ("slots are saved after each turn" if info.get("slot_save")
                  else "resuming long chats is the server's job there")
        c.toast(f"{model} on {ep.name}: {info.get('kind', '')} {info.get('version', '')}".rstrip() +
                f"; {resume}.")
        c.fit.known.clear()
        c.fit.show_for(c.current.id if c.current else None)
        c.fit.update()

    c.engine_job(job, done, c.report)


def use_local(window: Any) -> None:
    """Back to the built-in engine (before a local model is chosen); a no-op when it already answers."""
    ctx = window.ctx
    local = ctx.local_engine
    if local is None or local is ctx.engine:
        return
    name = ctx.model_path.stem if ctx.model_path else ""
    window.controller.engine_job(lambda: services_mod.use_engine(ctx, local, name))
