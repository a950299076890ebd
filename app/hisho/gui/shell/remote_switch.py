"""Choosing which engine answers: the local one or a model on a remote server (docs/remote-engines.md).

Rules of use: GUI thread. Probing servers runs on the ``remote`` lane (network waits never hold the engine or
the store lane); switching runs on the ``engine`` lane, between turns, through ``services.use_engine``. A
server that does not answer is left out of the picker and said in one line; nothing blocks the window.

The choice is remembered (``endpoints.save_choice``, written on the lane that made it): a window started after
a remote model was picked connects to it instead of loading a local model (``restore_choice``); when that
engine does not answer, it says so in one line and loads the local model as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from hisho.core import services as services_mod
from hisho.core.engine.protocol import LoadParams
from hisho.core.hub import QuantFile
from hisho.core.remote.endpoints import LOCAL, load_choice, load_endpoints, save_choice, with_key
from hisho.core.remote.engine import RemoteEngine
from hisho.core.remote.http import Endpoint
from hisho.core.remote.hub_match import serve_command, served_as
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


def use_remote(window: Any, ep: Endpoint, model: str,
               failed: Callable[[BaseException], None] | None = None) -> None:
    """Answer from ``model`` on ``ep`` from the next message on, and remember that choice."""
    ctx, c = window.ctx, window.controller
    was_ready, shown = c.model_ready, window.status.model.text()
    window.status.set_model(f"Connecting to {ep.name}…")
    c.model_ready = False                       # sends wait ("Waiting for <engine> to answer") until it is there
    c.sending.connecting = ep.name
    c.sending.show_queue()

    def job() -> dict[str, Any]:
        eng = RemoteEngine(with_key(ep))
        eng.on_wait = lambda name: ctx.executor.post(lambda: c.sending.waiting_on_remote(name))
        info = eng.load(LoadParams(model_path=model, n_ctx=int(ctx.settings["n_ctx"])))
        services_mod.use_engine(ctx, eng, model)
        save_choice(ep.name, model)
        return info

    def done(info: dict[str, Any]) -> None:
        n_ctx = int(info.get("n_ctx", 0))
        c.model_ready, c.model_failed = True, False
        c.sending.connecting = ""
        window.show_banner(ctx.problem)          # a local model's load problem is not this engine's
        window.model_label.setText(f"{model} · {ep.name}")
        window.status.set_model(f"{model} on {ep.name}", n_ctx)
        window.status.device.setText(ep.name)
        window.status.device.setToolTip(f"{info.get('kind', '')} at {ep.root}")
        window.empty_subtitle.setText(f"Chatting with {model}, running on {ep.name} ({ep.root}).")
        resume = ("slots are saved after each turn" if info.get("slot_save")
                  else "resuming long chats is the server's job there")
        c.toast(f"{model} on {ep.name}: {info.get('kind', '')} {info.get('version', '')}".rstrip() +
                f"; {resume}.")
        window.sidebar.set_engine_note(
            "" if info.get("slot_save") else
            f"Chats run on {ep.name}: resuming long chats is the server's job there (its prompt cache); "
            "Hisho's saved KV cache is used on this computer only.")
        if not getattr(window, "_cache_shown", False):
            window.turn_finished.connect(lambda result: show_server_cache(window, result))
            window._cache_shown = True
        c.fit.known.clear()
        c.fit.show_for(c.current.id if c.current else None)
        c.fit.update()
        c.sending.pump()

    def not_switched(exc: BaseException) -> None:
        c.model_ready = was_ready               # the engine that answered before still does
        c.sending.connecting = ""
        if was_ready:
            window.status.set_model(shown)
        (failed or c.report)(exc)

    c.engine_job(job, done, not_switched)


def show_server_cache(window: Any, _result: Any = None) -> None:
    """After a reply from a remote engine: the server's own prefix-cache figures in the status bar (what it
    reused of the prompt; llama-server ``timings.cache_n``, else ``usage.prompt_tokens_details.cached_tokens``)."""
    eng = window.ctx.engine
    reply = getattr(eng, "last_reply", None)
    if not eng.engine_info.get("remote") or reply is None:
        return
    name = eng.engine_info.get("engine", "")
    read = int(reply.extra.get("prompt_n", 0))
    window.status.device.setText(f"{name} · {reply.cached_tokens:,} of {reply.prompt_tokens:,} cached")
    window.status.device.setToolTip(f"{name} reused {reply.cached_tokens:,} prompt tokens from its cache and read "
                                    f"{read:,} (the server's own figures).")


def restore_choice(window: Any, fallback: Callable[[], None]) -> bool:
    """At start-up: connect to the remote model chosen last time (True), or return False when the local engine
    was the choice. If that engine does not answer now, say so in one line and run ``fallback`` (the local
    start-up)."""
    name, model = load_choice()
    ep = next((e for e in load_endpoints() if e.name == name), None)
    if name == LOCAL or ep is None:
        return False

    def failed(exc: BaseException) -> None:
        window.controller.toast(f"{exc}. Using this computer's model for now (Hisho tries {name} again at the "
                                "next start).", ms=15000)
        fallback()

    use_remote(window, ep, model, failed)
    return True


def use_local(window: Any) -> None:
    """Back to the built-in engine (before a local model is chosen); a no-op when it already answers."""
    ctx = window.ctx
    local = ctx.local_engine
    if local is None or local is ctx.engine:
        return
    name = ctx.model_path.stem if ctx.model_path else ""

    def job() -> None:
        services_mod.use_engine(ctx, local, name)
        save_choice(LOCAL)

    window.controller.engine_job(job, lambda _r: window.sidebar.set_engine_note(""))


def offer_remote(window: Any, hub: Any) -> None:
    """The Models page's Hub tab offers "Run on <engine>" for files too big here, when engines are configured."""
    hub.run_remote_requested.connect(lambda f, name: run_hub_model(window, f, name))
    window.ctx.executor.submit("remote", lambda: [e.name for e in load_endpoints()],
                               done=lambda names: setattr(hub, "remote_names", names))


def run_hub_model(window: Any, f: QuantFile, name: str) -> None:
    """Answer from hub file ``f`` on engine ``name``: at once when that server serves it already; else show the
    command that starts it there (a server loads its own models; docs/remote-engines.md)."""
    c = window.controller
    ep = next((e for e in load_endpoints() if e.name == name), None)
    if ep is None:
        c.toast(f"There is no engine named {name} any more (Settings → Engines).")
        return

    def done(info: ServerInfo) -> None:
        if not info.ok:
            c.toast(info.error, ms=15000)
            return
        model = served_as(info.models, f.repo, f.name, f.quant)
        if model:
            c.toast(f"{name} serves {f.name}: chatting with it there.")
            use_remote(window, ep, model)
            return
        box = QMessageBox(window)
        box.setWindowTitle(f"Run {f.quant or f.name} on {name}")
        box.setText(f"{name} does not serve {f.name} yet ({len(info.models)} model(s): "
                    f"{', '.join(info.models[:3])}). Start it on that machine with:")
        box.setInformativeText(serve_command(f.repo, f.quant))
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.setDetailedText("llama-server downloads the file itself. Then choose it in the chat header's model "
                            f"picker, under {name}. docs/remote-engines.md says how to run vLLM or SGLang too.")
        box.open()
        window._remote_help = box   # kept for tests and so it is not collected while open

    window.ctx.executor.submit("remote", lambda: probe(with_key(ep), timeout=5.0), done=done, failed=c.report)
