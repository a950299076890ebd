"""The chat presenter: user actions as small operations (Anki's ``aqt/operations``), split by concern.

- ``ChatController`` (here): the plumbing every part uses (worker lanes, toasts, errors), start-up and model
  loading, chat settings, theme, diagnostics, closing.
- ``hisho.gui.chat.sending.Sending``: the send queue, fit checks, streaming, Stop.
- ``hisho.gui.chat.conversation_list.ConversationList``: the list, the chat on screen, drafts, delete and Undo.
- ``hisho.gui.chat.editing.Editing``: per-message actions (edit, versions, delete with confirmation and Undo).
- ``hisho.gui.chat.context_fit.ContextFit``: the context meter and the draft's token count, per chat.

Rules:
- Background work goes through the op layer (``hisho.gui.ops``): ``store_job`` / ``engine_job`` here are the
  parts' shorthands for its ``database`` and ``engine`` ops (engine work one at a time; store reads and writes
  the window waits for on the database's one writer). Results come back on the GUI thread through the bridge.
- The presenter and its parts take narrow views of the window, never the window itself: ``ChatWindow`` (here)
  names what they use of it, ``Sending`` sees the screen only as ``SendScreen`` (named methods, made by
  ``ChatScreen``), ``ConversationList`` takes ``ListWindow``, ``Editing`` and ``ContextFit`` the widgets.
- The parts talk to widgets through their small public methods (``composer.focus()``, ``context_meter.show_fit``,
  ``view.show_queued``…), never through the widgets' insides.
- Closing mid-reply stops the engine, waits for the partial reply to be saved, and saves drafts (waiting
  messages become drafts).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QPushButton

from hisho.core.conversations.chat import FitReport, Turn
from hisho.core.conversations.store import Conversation
from hisho.core.errors import EngineError, LoadStopped, UserError
from hisho.core.planner.gate import PlanRefused
from hisho.core.units import MIB
from hisho.gui import ops
from hisho.gui.chat.context_fit import ContextFit
from hisho.gui.chat.conversation_list import ConversationList, ListWindow
from hisho.gui.chat.editing import Editing
from hisho.gui.chat.send_screen import ChatScreen, SendWindow
from hisho.gui.chat.sending import Sending
from hisho.gui.chat.title_edit import InlineTitle
from hisho.gui.settings.settings_dialog import ConversationSettingsDialog
from hisho.gui.shell import theme
from hisho.gui.shell.protocols import TOAST_MS
from hisho.gui.shell.remote_switch import RemoteWindow

if TYPE_CHECKING:
    from hisho.gui.shell.status_bar import ContextMeter, StatusBar

log = logging.getLogger("hisho.gui")

CLOSE_WAIT_S = 2.0  # the lanes' work, once cancelled, is given this long twice: before and after a kill
ERROR_MS = 15000   # errors stay longer than confirmations
MODEL_FIELDS = ("model",)  # chat settings whose change needs another model loaded


class ChatWindow(ListWindow, SendWindow, RemoteWindow, Protocol):
    """What the chat presenter uses of the main window: what its parts use (the list, the send's screen, the
    remote switch at start-up), the header's meter and Chat settings button, and, as named methods, the toast
    over the chat and what the status bar, the header and the banner say about the model."""

    @property
    def context_meter(self) -> ContextMeter: ...

    @property
    def status(self) -> StatusBar: ...   # what the send's StatusLine and the remote switch use of it, and more

    @property
    def settings_button(self) -> QPushButton: ...

    def show_toast(self, text: str, undo: Callable[[], None] | None, label: str, ms: int) -> None: ...
    def toast_undo(self) -> bool: ...   # runs the toast's Undo if it offers one; True when it did
    def dismiss_toast(self, prefix: str) -> None: ...   # only a toast whose text starts with ``prefix``
    def show_model_status(self, text: str, n_ctx: int | None = None) -> None: ...
    def show_load_stop(self, shown: bool) -> None: ...
    def disable_load_stop(self) -> None: ...
    def show_local_engine(self, engine_info: dict[str, object], gpu_layers: int, pid: int | None) -> None: ...


class ChatController(QObject):
    def __init__(self, window: ChatWindow) -> None:
        super().__init__(window.window())
        self.w = window
        self.ctx = window.ctx
        self.store = self.ctx.store
        self.service = self.ctx.chat
        self.executor = self.ctx.executor
        self.executor.on_error = self.report
        self.current: Conversation | None = None
        self._loading_name = str(self.ctx.model_path or "")  # what a "Load anyway" retries
        self._closing = False
        self._loading_since = 0.0
        self._loading_name_shown = ""
        self._load_tick = QTimer(self)
        self._load_tick.setInterval(500)
        self._load_tick.timeout.connect(self._show_loading)
        window.status.stop_load.clicked.connect(self.stop_load)
        self.title_editor = InlineTitle(window.title)
        self.listing = ConversationList(self, window)
        self.editing = Editing(self, window.view, window.composer)
        self.fit = ContextFit(self, window.context_meter, window.composer)
        self.sending = Sending(self, ChatScreen(window), self.fit, self.editing.edit_ended)
        window.view.cancel_queued.connect(self.sending.cancel_queued)
        self.title_editor.renamed.connect(self.listing.rename_current)
        window.composer.send_requested.connect(self.sending.send)
        window.composer.stop_requested.connect(self.sending.stop_here)
        window.composer.draft_changed.connect(self.listing.draft_changed)
        window.composer.outer_undo = self.undo
        window.settings_button.clicked.connect(self.open_settings)

    # ----- plumbing --------------------------------------------------------------------------------------

    def store_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None) -> None:
        ops.database(self.executor, fn).success(done).run()

    def engine_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None,
                   failed: Callable[[BaseException], Any] | None = None) -> None:
        ops.engine(self.executor, fn).success(done).failure(failed).run()

    def report(self, exc: BaseException) -> None:
        """Errors of background operations: the user's (one line) or a bug (logged, short message)."""
        if isinstance(exc, UserError):
            self.toast(str(exc), ms=ERROR_MS)
        elif isinstance(exc, EngineError):
            self.toast(f"engine: {exc}", ms=ERROR_MS)
        else:
            log.error("background operation failed", exc_info=exc)
            self.toast(f"Something went wrong: {type(exc).__name__}: {exc} (details in the log)", ms=ERROR_MS)

    @property
    def model_ready(self) -> bool:
        """A message may be sent now (the app's state: a model answers, no other engine is being connected)."""
        return self.ctx.state.now.ready

    @property
    def model_failed(self) -> bool:
        """Nothing could be loaded (the app's state says why); sends are refused until a model answers."""
        return bool(self.ctx.state.now.failed)

    @property
    def replying(self) -> bool:
        """A reply is being written (a send or a regenerate is under way)."""
        return self.sending.active is not None

    def toast(self, text: str, undo: Callable[[], None] | None = None, label: str = "Undo",
              ms: int = TOAST_MS) -> None:
        """A message over the chat, where the user is looking; ``undo`` adds a button (and Ctrl+Z)."""
        self.w.show_toast(text, undo, label, ms)

    def undo(self) -> bool:
        """Ctrl+Z: the Undo the toast offers, if any (False: nothing to undo here)."""
        return self.w.toast_undo()

    def title_of(self, cid: int) -> str:
        return self.listing.title_of(cid)

    # ----- what other parts and tests call ---------------------------------------------------------------

    @property
    def active(self) -> Turn | None:
        return self.sending.active

    @property
    def running(self) -> Turn | None:
        return self.sending.running

    @property
    def last_fit(self) -> FitReport | None:
        return self.fit.last

    def select(self, cid: int) -> None:
        self.listing.select(cid)

    def refresh(self, select: int | None = None) -> None:
        self.listing.refresh(select)

    def reload(self) -> None:
        self.listing.reload()

    def send(self, text: str) -> None:
        self.sending.send(text)

    def stop(self) -> None:
        self.sending.stop()

    def message_action(self, name: str, mid: int) -> None:
        self.editing.message_action(name, mid)

    def update_meter(self, draft: str | None = None) -> None:
        self.fit.update(draft)

    def delete_chat(self, cid: int) -> None:
        self.listing.delete_chat(cid)

    # ----- start-up and the model ------------------------------------------------------------------------

    def start(self) -> None:
        from hisho.gui.shell.remote_switch import restore_choice

        if not restore_choice(self.w):  # the remote engine chosen last time, if any
            self._start_model()
        if not self.store.read_only:  # chats deleted in an earlier session are past their Undo: remove them
            self.store_job(lambda: self.store.purge_deleted())
        self.store_job(lambda: self.store.conversations(), self.listing.listed_first)

    def _start_model(self) -> None:
        ctx = self.ctx
        if ctx.state.now.failed:   # the root found nothing to load (its plan refused, or no model)
            self.w.show_banner(ctx.model_problem or "no model to load")
            if ctx.plan_refused and ctx.model_path is not None:
                self.offer_load_anyway(str(ctx.model_path))
        else:
            self._loading(ctx.model_name.display)
            # The root restores what the user chose last; no remote engine is saved here, so this loads the
            # planned local model (a crash or a file it cannot load comes back as one line).
            self.engine_job(lambda: self.ctx.restore_engine().info, self._loaded, self._load_failed)

    def _loading(self, name: str) -> None:
        """Show that the load runs, how far the engine is in the file (its "progress"), and for how long."""
        self._loading_name_shown = name
        self._loading_since = time.monotonic()
        self._show_loading()
        self._load_tick.start()
        self.w.show_load_stop(True)

    def stop_load(self) -> None:
        """The load wait's Stop: the engine gives up reading the file (``Engine.cancel_load``, at once, from
        this thread); ``Services.switch_model`` then loads the model that answered before, if there was one."""
        engine = self.ctx.local_engine or self.ctx.engine
        if engine.cancel_load():
            self.w.disable_load_stop()
            self._loading_name_shown = f"{self._loading_name_shown}: stopping"
            self._show_loading()

    def _show_loading(self) -> None:
        seconds = int(time.monotonic() - self._loading_since)
        progress = self.ctx.engine.progress()
        percent = f" {int(progress.fraction * 100)} %" if progress is not None and progress.op == "load" else ""
        elapsed = f" · {seconds} s" if seconds else ""
        self.w.show_model_status(f"Loading {self._loading_name_shown}…{percent}{elapsed}")

    def _end_load_notice(self) -> None:
        """A toast that announced the load ("Loading X…", from the header's menu or the Models page) is out
        of date once the load ended: it goes at once instead of covering the chat for its full time."""
        self.w.show_load_stop(False)
        self.w.dismiss_toast("Loading ")

    def _loaded(self, info: dict[str, Any]) -> None:
        self._load_tick.stop()
        self._end_load_notice()
        params = self.ctx.engine.load_params
        # the model's name, context and figures follow the app's state; this adds where the engine runs
        self.w.show_local_engine(self.ctx.engine.engine_info, params.n_gpu_layers if params else 0,
                                 self.ctx.engine.pid)
        self.fit.known.clear()  # another model counts differently
        self.fit.show_for(self.current.id if self.current else None)
        self.fit.update()
        self.sending.pump()

    def _load_failed(self, exc: BaseException) -> None:
        if isinstance(exc, LoadStopped) and exc.restored is not None:  # the model before answers again
            self._loaded(exc.restored)
            self.toast(f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
            return
        self._load_tick.stop()
        self._end_load_notice()
        self.w.show_model_status("No model loaded")
        self.w.show_banner(f"{str(exc)[:1].upper()}{str(exc)[1:]}. Choose a model from the header's menu or on "
                           "the Models page." if isinstance(exc, LoadStopped)
                           else f"The model could not be loaded: {exc}")
        if isinstance(exc, PlanRefused):
            self.offer_load_anyway(self._loading_name)
        self.sending.pump()

    def offer_load_anyway(self, name: str) -> None:
        """The memory plan refused the load; the user may still try it (it may swap or fail)."""
        self.toast("The memory plan says this model will not fit.",
                   lambda: self.switch_model(name, override=True), label="Load anyway", ms=60_000)

    def switch_model(self, name: str, override: bool = False) -> None:
        """A local model answers from now on (``Services.switch_model``: planned and loaded as at start-up; a
        remote engine steps aside)."""
        self.ctx.asked_to_switch()   # new messages wait for the switch (the app's state says so)
        self._loading_name = name
        self._loading(Path(name).name if name else "the default model")   # a path: its file's name
        self.engine_job(lambda: self.ctx.switch_model(name or None, override=override), self._loaded,
                        self._load_failed)

    # ----- settings, theme, diagnostics ------------------------------------------------------------------

    def open_settings(self) -> None:
        if self.current is None:
            self.toast("Start a chat first.")
            return
        models = [(e.name, f"{e.name}  ({e.size / MIB:,.0f} MiB)") for e in self.ctx.models.list()]
        dialog = ConversationSettingsDialog(self.current, models, self.w.window(),
                                            presets=list(self.ctx.settings["system_prompt_presets"]),
                                            reasoning=self.service.reasoning, answering=self.ctx.state.now)
        accepted = dialog.exec()
        if dialog.new_preset is not None:
            self.add_preset(dialog.new_preset)
        if not accepted:
            return
        model, system, settings = dialog.values()
        cid, old_model = self.current.id, self.current.model
        self.store_job(lambda: self.store.update(cid, model=model, system_prompt=system, settings=settings),
                       lambda conv: self._settings_saved(conv, old_model))

    def add_preset(self, preset: dict[str, str]) -> None:
        """Keep a preset named in Chat settings ("Save as preset…") in the app's settings."""
        try:
            self.ctx.settings.set("system_prompt_presets", [*self.ctx.settings["system_prompt_presets"], preset])
        except ValueError as exc:
            self.toast(f"The preset was not saved: {exc}")
            return
        ops.save_settings(self.executor, self.ctx.settings).failure(self.report).run()

    def _settings_saved(self, conv: Conversation, old_model: str) -> None:
        if self.current is not None and self.current.id == conv.id:
            self.current = conv
        now = self.ctx.state.now
        loaded = None if now.remote else now.model
        # Only a different model needs a reload; the system prompt and sampling apply to the next reply.
        if conv.model != old_model and conv.model and (loaded is None or not loaded.accepts(conv.model)):
            self.switch_model(conv.model)
        self.fit.update()

    def set_theme(self, name: str) -> None:
        """View → Theme: apply it now and remember it (``theme`` setting)."""
        app = QApplication.instance()
        if not isinstance(app, QApplication):
            return
        theme.apply(app, theme.choose(name))
        try:
            if self.ctx.settings["theme"] != name:
                self.ctx.settings.set("theme", name)
                self.ctx.settings.save()
        except (OSError, ValueError) as exc:
            log.warning("could not save the theme setting: %s", exc)
        self.listing.reload()  # code blocks take the new colours

    def follow_system_theme(self, *_: object) -> None:
        if self.ctx.settings["theme"] == "system":
            self.set_theme("system")

    def copy_diagnostics(self) -> None:
        e = self.ctx.engine
        lines = [f"engine: {e.engine_info}", f"load: {e.load_info}", f"params: {e.load_params}",
                 f"restarts: {e.restarts}", f"store read-only: {self.store.read_only}", f"problem: {self.ctx.problem}"]
        QGuiApplication.clipboard().setText("\n".join(lines))
        self.toast("Diagnostics copied to the clipboard.", ms=2500)

    # ----- closing -----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop a reply, let it be saved, save the draft and waiting messages, stop the engine. Safe twice."""
        if self._closing:
            return
        self._closing = True
        start = time.perf_counter()
        if not self.store.read_only:
            try:  # direct calls: the store lane is about to shut down and this must not be lost
                if self.current is not None:
                    self.store.update(self.current.id, draft=self.w.composer.draft_text())
                self.sending.close()
            except UserError as exc:
                log.error("could not save the draft: %s", exc)
        self.sending.stop()
        self.ctx.begin_close()  # a model still loading gives up at once: the quit does not wait for it
        self.w.view.detach_stream()
        if not self.executor.shutdown(CLOSE_WAIT_S):
            # A reply or a summary did not stop in time (an engine deep in a long batch, or not answering): its
            # text so far is saved already. Killing the engine fails every request in flight at once, so the
            # lanes' jobs end now.
            self.ctx.engine.kill()
            self.executor.shutdown(CLOSE_WAIT_S)
        self.ctx.engine.close()
        log.info("window closed in %.2fs", time.perf_counter() - start)
