"""Choosing which engine answers: the local one or a model on a remote server (docs/remote-engines.md).

Rules of use: GUI thread. Probing servers runs on the ``remote`` lane (network waits never hold the engine or
the store lane); switching runs on the ``engine`` lane, between turns, through the composition root
(``Services.connect`` / ``disconnect`` / ``restore_engine``), which also remembers the choice: this module
only shows it. A server that does not answer is left out of the picker and said in one line; nothing blocks
the window.

A window started after a remote model was picked connects to it instead of loading a local model
(``restore_choice``, as ``hisho chat`` does); when that engine does not answer, it says so in one line and
loads the local model as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import Qt, SignalInstance
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from hisho.core import services as services_mod
from hisho.core.hub import QuantFile
from hisho.core.remote.endpoints import load_endpoints, with_key
from hisho.core.remote.http import Endpoint
from hisho.core.remote.hub_match import serve_command, served_as
from hisho.core.remote.probe import ServerInfo, probe
from hisho.gui import ops
from hisho.gui.shell.protocols import HasController, HasState

if TYPE_CHECKING:
    from hisho.core.appstate import Now
    from hisho.gui.chat.sidebar import Sidebar
    from hisho.gui.models.hub_tab import HubTab
    from hisho.gui.shell.controller import ChatController
    from hisho.gui.shell.status_bar import StatusBar

log = logging.getLogger("hisho.gui")


class RemoteWindow(HasController, HasState, Protocol):
    """Switching between the local engine and a remote one: what it shows where, and its dialog. It drives the
    presenter's load and send (``ChatController``, a frame insider like this module), not just a screen's part."""

    @property
    def controller(self) -> ChatController: ...

    _cache_shown: bool                 # the status bar follows a remote server's cache figures (connected once)
    _remote_help: QMessageBox | None   # "start it there with…", kept while open

    @property
    def status(self) -> StatusBar: ...

    @property
    def model_label(self) -> QLabel: ...

    @property
    def empty_subtitle(self) -> QLabel: ...

    def show_state(self, now: Now) -> None: ...   # what answers now: the header, the status bar

    @property
    def sidebar(self) -> Sidebar: ...

    @property
    def turn_finished(self) -> SignalInstance: ...

    def show_banner(self, text: str) -> None: ...

    def window(self) -> QWidget: ...


def reachable() -> list[tuple[Endpoint, ServerInfo]]:
    """Every configured engine that answers now, with its models (``remote`` lane)."""
    out = []
    for ep in load_endpoints():
        info = probe(with_key(ep), timeout=3.0)
        if info.ok:
            out.append((ep, info))
    return out


def use_remote(window: RemoteWindow, ep: Endpoint, model: str,
               failed: Callable[[BaseException], None] | None = None) -> None:
    """Answer from ``model`` on ``ep`` from the next message on, and remember that choice."""
    ctx, c = window.ctx, window.controller
    was_ready, shown = c.model_ready, window.status.model.text()
    window.status.set_model(f"Connecting to {ep.name}…")
    ctx.asked_to_connect(ep.name)               # sends wait ("Waiting for <engine> to answer") until it is there
    c.sending.show_queue()

    def job() -> dict[str, Any]:
        return dict(ctx.connect(ep, model, on_wait=waiting(window)))

    def not_switched(exc: BaseException) -> None:
        if was_ready:                           # the engine that answered before still does (Services.connect)
            window.status.set_model(shown)
        (failed or c.report)(exc)

    c.engine_job(job, lambda info: connected(window, ep, model, info), not_switched)


def waiting(window: RemoteWindow) -> Callable[[str], None]:
    """A remote engine's "no first byte yet" notice, delivered to the window (any thread)."""
    return lambda name: window.ctx.executor.post(lambda: window.controller.sending.waiting_on_remote(name))


def connected(window: RemoteWindow, ep: Endpoint, model: str, info: dict[str, Any]) -> None:
    """The window once ``model`` on ``ep`` answers (GUI thread)."""
    ctx, c = window.ctx, window.controller
    window.show_banner(ctx.problem)          # a local model's load problem is not this engine's
    window.show_state(ctx.state.now)         # its name, as the app's state says (Services.connect set it)
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
    if not window._cache_shown:
        window.turn_finished.connect(lambda result: show_server_cache(window, result))
        window._cache_shown = True
    c.fit.known.clear()
    c.fit.show_for(c.current.id if c.current else None)
    c.fit.update()
    c.sending.pump()


def show_server_cache(window: RemoteWindow, _result: Any = None) -> None:
    """After a reply from a remote engine: the server's own prefix-cache figures in the status bar (what it
    reused of the prompt; llama-server ``timings.cache_n``, else ``usage.prompt_tokens_details.cached_tokens``)."""
    eng = window.ctx.engine
    reply = getattr(eng, "last_reply", None)
    if not window.state.now.remote or reply is None:
        return
    name = eng.engine_info.get("engine", "")
    read = int(reply.extra.get("prompt_n", 0))
    window.status.device.setText(f"{name} · {reply.cached_tokens:,} of {reply.prompt_tokens:,} cached")
    window.status.device.setToolTip(f"{name} reused {reply.cached_tokens:,} prompt tokens from its cache and read "
                                    f"{read:,} (the server's own figures).")


def restore_choice(window: RemoteWindow) -> bool:
    """At start-up, when a remote model was chosen last time: ``Services.restore_engine`` connects to it (True);
    False when the local engine was the choice (the controller's local start-up runs). If that engine does not
    answer now, the root loads the local model and the window says why in one line."""
    ctx, c = window.ctx, window.controller
    saved = ctx.saved_remote()
    if saved is None:
        return False
    ep, model = saved
    window.status.set_model(f"Connecting to {ep.name}…")
    ctx.asked_to_connect(ep.name)

    def done(running: services_mod.Running) -> None:
        if running.endpoint is not None:
            connected(window, running.endpoint, running.model, running.info)
            return
        c.toast(running.fallback, ms=15000)
        c._loaded(running.info)

    def failed(exc: BaseException) -> None:
        c._load_failed(exc)

    c.engine_job(lambda: ctx.restore_engine(on_wait=waiting(window)), done, failed)
    return True


def offer_remote(window: RemoteWindow, hub: HubTab) -> None:
    """The Models page's Hub tab offers "Run on <engine>" for files too big here, when engines are configured."""
    hub.run_remote_requested.connect(lambda f, name: run_hub_model(window, f, name))
    ops.remote(window.ctx.executor, lambda: [e.name for e in load_endpoints()]) \
        .success(lambda names: setattr(hub, "remote_names", names)).run()


def run_hub_model(window: RemoteWindow, f: QuantFile, name: str) -> None:
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
        box = QMessageBox(window.window())
        box.setWindowTitle(f"Run {f.quant or f.name} on {name}")
        box.setText(f"{name} does not serve {f.name} yet ({len(info.models)} model(s): "
                    f"{', '.join(info.models[:3])}). Start it on that machine with:")
        box.setInformativeText(serve_command(f.repo, f.quant))
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.setDetailedText("llama-server downloads the file itself. Then choose it in the chat header's model "
                            f"picker, under {name}. docs/remote-engines.md says how to run vLLM or SGLang too.")
        box.open()
        window._remote_help = box   # kept for tests and so it is not collected while open

    ops.remote(window.ctx.executor, lambda: probe(with_key(ep), timeout=5.0)).success(done).failure(c.report).run()
