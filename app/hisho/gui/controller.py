"""User actions as small operations (Anki's ``aqt/operations``): each says what runs on which worker lane and
what the window does with the result. Widgets never start work themselves; they call in here.

Rules:
- Engine work (load, token counts, replies) runs on the ``engine`` lane, one at a time; store reads and writes
  the window waits for run on the ``store`` lane. Results come back on the GUI thread through the bridge.
- One reply streams at a time (``active``). Its text reaches the view only through a ``TextBuffer`` tagged with
  the turn id; switching chats detaches it, so late text never lands in another chat.
- Closing mid-reply stops the engine, waits for the partial reply to be saved, and saves the draft.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QPushButton

from hisho.core import conversation_io
from hisho.core.chat import FitReport, Turn, TurnResult
from hisho.core.conversations import Conversation, Message
from hisho.core.errors import EngineError, UserError
from hisho.core.launch import load_params_for, open_model
from hisho.core.models import ModelStore
from hisho.core.planner.gate import PlanRefused
from hisho.core.units import MIB
from hisho.gui import theme
from hisho.gui.bridge import TextBuffer
from hisho.gui.settings_dialog import ConversationSettingsDialog
from hisho.gui.title_edit import InlineTitle

if TYPE_CHECKING:
    from hisho.gui.main_window import MainWindow

log = logging.getLogger("hisho.gui")

CLOSE_WAIT_S = 10.0
UNDO_MS = 8000


class ChatController(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.w = window
        self.ctx = window.ctx
        self.store = self.ctx.store
        self.service = self.ctx.chat
        self.workers = self.ctx.executor
        self.workers.on_error = self.report
        self.current: Conversation | None = None
        self.active: tuple[Turn, TextBuffer] | None = None   # the streaming turn, as the GUI knows it
        self.running: Turn | None = None                     # set by the engine lane while a turn runs
        self.model_ready = False
        self._loading_name = str(self.ctx.model_path or "")  # what a "Load anyway" retries
        self.last_fit: FitReport | None = None
        self._count_seq = 0
        self._find_after: int | None = None
        self._closing = False
        w = window
        w.sidebar.selected.connect(self.select)
        w.sidebar.new_requested.connect(self.new_chat)
        w.sidebar.rename_requested.connect(lambda cid, t: self._store(lambda: self.store.update(cid, title=t),
                                                                      lambda _c: self.refresh(cid)))
        w.sidebar.pin_requested.connect(lambda cid, p: self._store(lambda: self.store.update(cid, pinned=p),
                                                                   lambda _c: self.refresh()))
        w.sidebar.delete_requested.connect(self.delete_chat)
        w.sidebar.export_requested.connect(self.export_chat)
        w.sidebar.search_changed.connect(self.search)
        w.composer.send_requested.connect(self.send)
        w.composer.stop_requested.connect(self.stop)
        w.composer.draft_changed.connect(self.draft_changed)
        w.composer.edit_cancelled.connect(self._edit_ended)
        self.title_editor = InlineTitle(w.title)
        self.title_editor.renamed.connect(self.rename_current)
        self._edited: int | None = None      # the message shown highlighted while the composer edits it
        w.view.action.connect(self.message_action)
        w.settings_button.clicked.connect(self.open_settings)

    # ----- plumbing --------------------------------------------------------------------------------------

    def _store(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None) -> None:
        self.workers.submit("store", fn, done=done)

    def _engine(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None,
                failed: Callable[[BaseException], Any] | None = None) -> None:
        self.workers.submit("engine", fn, done=done, failed=failed)

    def report(self, exc: BaseException) -> None:
        """Errors of background operations: the user's (one line) or a bug (logged, short message)."""
        if isinstance(exc, UserError):
            self.toast(str(exc))
        elif isinstance(exc, EngineError):
            self.toast(f"engine: {exc}")
        else:
            log.error("background operation failed", exc_info=exc)
            self.toast(f"Something went wrong: {type(exc).__name__}: {exc} (details in the log)")

    def toast(self, text: str, undo: Callable[[], None] | None = None, label: str = "Undo") -> None:
        bar = self.w.status
        bar.showMessage(text, UNDO_MS)
        if undo is not None:
            button = QPushButton(label)
            button.setObjectName("Flat")
            bar.addWidget(button)

            def clicked() -> None:
                undo()
                bar.clearMessage()
                button.deleteLater()

            button.clicked.connect(clicked)
            bar.messageChanged.connect(button.deleteLater)  # a slot of the button: gone with it

    # ----- start-up --------------------------------------------------------------------------------------

    def start(self) -> None:
        ctx = self.ctx
        if ctx.model_problem or ctx.load_params is None:
            self.w.show_banner(ctx.model_problem or "no model to load")
            if ctx.plan_refused and ctx.model_path is not None:
                self.offer_load_anyway(str(ctx.model_path))
        else:
            params = ctx.load_params
            self.w.status.set_model(Path(params.model_path).stem)
            self.w.status.model.setText(f"Loading {Path(params.model_path).stem}…")
            self._engine(lambda: self.ctx.engine.load(params), self._loaded, self._load_failed)
        if not self.store.read_only:  # chats deleted in an earlier session are past their Undo: remove them
            self._store(lambda: self.store.purge_deleted())
        self._store(lambda: self.store.conversations(), self._listed_first)

    def _loaded(self, info: dict[str, Any]) -> None:
        self.model_ready = True
        params = self.ctx.engine.load_params
        name = Path(params.model_path).stem if params else ""
        self.w.status.set_model(name, int(info.get("n_ctx", 0)))
        self.w.status.set_device(self.ctx.engine.engine_info, params.n_gpu_layers if params else 0)
        self.w.status.engine_pid = self.ctx.engine.pid
        self.w.model_label.setText(name)
        self.w.empty_subtitle.setText(f"Chatting with {name}, on this computer. Nothing leaves it.")
        self.update_meter()

    def _load_failed(self, exc: BaseException) -> None:
        self.w.status.model.setText("No model loaded")
        self.w.show_banner(f"The model could not be loaded: {exc}")
        if isinstance(exc, PlanRefused):
            self.offer_load_anyway(self._loading_name)

    def offer_load_anyway(self, name: str) -> None:
        """The memory plan refused the load; the user may still try it (it may swap or fail)."""
        self.toast("The memory plan says this model will not fit.",
                   lambda: self.switch_model(name, override=True), label="Load anyway")

    def _listed_first(self, convs: list[Conversation]) -> None:
        self.w.sidebar.set_conversations(convs, None)
        if convs:
            self.select(convs[0].id)
        else:
            self.w.show_empty(True)
            self.w.composer.edit.setFocus()

    # ----- conversations ---------------------------------------------------------------------------------

    def refresh(self, select: int | None = None) -> None:
        current = select if select is not None else (self.current.id if self.current else None)
        self._store(lambda: self.store.conversations(), lambda convs: self.w.sidebar.set_conversations(convs, current))

    def select(self, cid: int) -> None:
        self._save_draft()
        self.w.view.detach_stream()
        self._store(lambda: self._load_chat(cid), self._show_chat)

    def _load_chat(self, cid: int) -> tuple[Conversation, list[Message], dict[int, list[int]]]:
        conv = self.store.get(cid)
        branch = self.store.branch(cid)
        return conv, branch, {m.id: self.store.siblings(m.id) for m in branch}

    def _show_chat(self, data: tuple[Conversation, list[Message], dict[int, list[int]]]) -> None:
        conv, branch, siblings = data
        switched = self.current is None or self.current.id != conv.id
        self.current = conv
        self._find_after = None
        if switched or not self.title_editor.editing:
            self.title_editor.cancel()
            self.w.title.setText(conv.title)
        self.w.sidebar.current_id = conv.id  # first, so selecting the row does not re-enter select()
        self.w.sidebar.select(conv.id)
        self.w.view.show_branch(conv.id, branch, siblings)
        if self.active is not None and self.active[0].conversation_id == conv.id:
            turn, buffer = self.active
            self.w.view.begin_stream(turn.id, buffer, turn.text)
        self.w.show_empty(not branch and not (self.active and self.active[0].conversation_id == conv.id))
        if switched:  # a reload of the same chat must not overwrite what is being typed
            self.w.composer.end_edit()
            self.w.composer.set_text(conv.draft)
            self.w.conversation_selected.emit(conv.id)
        self.update_meter()

    def reload(self) -> None:
        if self.current is not None:
            cid = self.current.id
            self._store(lambda: self._load_chat(cid), self._show_chat)

    def new_chat(self) -> None:
        if self.current is not None and not self.w.view.messages and self.active is None:
            self.w.composer.edit.setFocus()  # already on an empty chat
            return
        self._save_draft()
        model = self.current.model if self.current else ""
        self._store(lambda: self.store.create(model=model), lambda conv: self._created(conv.id))

    def _created(self, cid: int) -> None:
        self.refresh(cid)
        self.select(cid)
        self.w.composer.edit.setFocus()

    def rename_current(self, title: str) -> None:
        """The header title was edited in place (double-click or F2)."""
        if self.current is None or not title.strip():
            return
        cid, title = self.current.id, title.strip()
        self.current.title = title
        self._store(lambda: self.store.update(cid, title=title), lambda _c: self.refresh(cid))

    def start_rename(self) -> None:
        """F2 / Chat → Rename: edit the title where it is shown."""
        if self.current is None:
            self.toast("Start a chat first.")
            return
        self.title_editor.start()

    def delete_chat(self, cid: int) -> None:
        def done(_: object) -> None:
            if self.current is not None and self.current.id == cid:
                self.current = None
                self.w.view.clear()
                self.w.show_empty(True)
                self.w.title.setText("New chat")
            self.refresh()
            self.toast("Chat deleted.", undo=lambda: self._store(lambda: self.store.restore(cid),
                                                                 lambda _r: self.refresh()))
        if self.active is not None and self.active[0].conversation_id == cid:
            self.stop()
        self._store(lambda: self.store.delete(cid), done)

    def search(self, text: str) -> None:
        if not text.strip():
            self.refresh()
            return
        current = self.current.id if self.current else None
        self._store(lambda: self.store.search(text), lambda hits: self.w.sidebar.set_search_results(hits, current))

    def find_next(self) -> None:
        hit = self.w.view.find(self.w.find_edit.text(), self._find_after)
        self._find_after = hit
        self.w.find_status.setText("" if hit is not None else "No match")

    def draft_changed(self, text: str) -> None:
        if self.current is not None and self.w.composer.editing_id is None:  # type-ahead: new messages only
            self.w.draft_changed.emit(self.current.id, text)
        self._save_draft()
        self.update_meter(text)

    def _save_draft(self) -> None:
        if self.current is None or self.store.read_only:
            return
        cid, text = self.current.id, self.w.composer.draft_text()
        if text != self.current.draft:
            self.current.draft = text
            self._store(lambda: self.store.update(cid, draft=text))

    # ----- sending and streaming -------------------------------------------------------------------------

    def send(self, text: str) -> None:
        if not text.strip() or self.active is not None:
            return
        if not self.model_ready:
            self.toast("The model is still loading (or failed to load); your message is kept.")
            return
        editing = self.w.composer.editing_id
        if self.current is None:
            self._store(lambda: self.store.create(), lambda conv: (self._created_for_send(conv, text)))
            return
        cid = self.current.id
        if editing is not None:
            self._start_turn(lambda: self.service.edit(editing, text), clear=True)
            return
        self._engine(lambda: self.service.check_fit(cid, text), lambda fit: self._fit_checked(cid, text, fit))

    def _created_for_send(self, conv: Conversation, text: str) -> None:
        self.current = conv
        self.refresh(conv.id)
        self.w.sidebar.current_id = conv.id
        self.w.view.show_branch(conv.id, [], {})
        self.send(text)

    def _fit_checked(self, cid: int, text: str, fit: FitReport) -> None:
        self.last_fit = fit
        if fit.fits:
            self._start_turn(lambda: self.service.send(cid, text), clear=True)
            return
        box = QMessageBox(self.w)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("This chat no longer fits the context")
        box.setText(f"The conversation with your message is {fit.prompt_tokens:,} tokens; the model's context "
                    f"holds {fit.n_ctx:,} (and a reply needs about {fit.reply_tokens:,} more).")
        box.setInformativeText("Nothing has been cut. Choose how to continue:")
        drop = box.addButton("Drop the oldest turns", QMessageBox.ButtonRole.AcceptRole)
        summary = box.addButton("New chat with a summary", QMessageBox.ButtonRole.ActionRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is drop:
            self._start_turn(lambda: self.service.send(cid, text, drop_oldest=True), clear=True)
        elif box.clickedButton() is summary:
            # No timeout: the summary can take a while, and the next message (done or failed) replaces this one.
            self.w.status.showMessage("Writing a summary of this chat for a new one… your message is kept.")
            self._engine(lambda: self.service.summarize_into_new(cid), lambda new_id: self._summarized(new_id, text))

    def _summarized(self, new_id: int, text: str) -> None:
        """The message moves with the user: it becomes the new chat's draft (and leaves the old chat's)."""
        if self.current is not None and self.current.id != new_id and self.w.composer.text() == text:
            self.w.composer.edit.clear()

        def opened(_: object) -> None:
            self.refresh(new_id)
            self.select(new_id)
            self.toast("Started a new chat from a summary; your message is ready to send.")

        self._store(lambda: self.store.update(new_id, draft=text), opened)

    def _start_turn(self, make: Callable[[], Turn], *, clear: bool = False) -> None:
        """Record the user's side, then stream the reply, all on the engine lane."""
        if self.active is not None:
            self.toast("Wait for the reply to finish, or press Stop.")
            return
        self.w.composer.set_generating(True)

        def job() -> TurnResult:
            turn = make()
            self.running = turn  # visible to stop()/shutdown() before the GUI hears of the turn
            buffer = TextBuffer(turn.id)
            branch = self.store.branch(turn.conversation_id, turn.parent_id)
            siblings = {m.id: self.store.siblings(m.id) for m in branch}
            self.workers.post(lambda: self._began(turn, buffer, branch, siblings, clear))
            try:
                return self.service.run(turn, buffer.append)
            finally:
                self.running = None

        self._engine(job, self._finished, self._turn_failed)

    def _began(self, turn: Turn, buffer: TextBuffer, branch: list[Message], siblings: dict[int, list[int]],
               clear: bool) -> None:
        self.active = (turn, buffer)
        if clear:
            if self.w.composer.editing_id is not None:
                self.w.composer.end_edit(restore=True)  # the edit is sent; what was typed before comes back
            else:
                self.w.composer.edit.clear()
            self._edited = None
        if self.current is not None and self.current.id == turn.conversation_id:
            self.w.show_empty(False)
            self.w.view.show_branch(turn.conversation_id, branch, siblings)
            self.w.view.begin_stream(turn.id, buffer)

    def _finished(self, result: TurnResult) -> None:
        turn = result.turn
        self.active = None
        self.w.composer.set_generating(False)
        m = result.message
        self.w.status.set_reply_figures(m.tokens_per_s, m.ttft_s)
        if self.current is not None and self.current.id == turn.conversation_id:
            self.w.view.end_stream(turn.id, m, [m.id])
            self.reload()  # sibling counts and the title may have changed
        if result.error:
            self.toast(result.error)
        self.refresh()
        self.update_meter()
        self.w.turn_finished.emit(result)

    def _turn_failed(self, exc: BaseException) -> None:
        self.active = None
        self.w.composer.set_generating(False)
        self.w.view.detach_stream()
        self.report(exc)
        self.reload()

    def stop(self) -> None:
        turn = self.running
        if turn is not None:
            turn.cancel()

    # ----- per-message actions ---------------------------------------------------------------------------

    def message_action(self, name: str, mid: int) -> None:
        if name == "copy":
            self.toast("Copied to the clipboard.")
        elif name in ("regenerate", "retry"):
            self._start_turn(lambda: self.service.regenerate(mid))
        elif name == "edit":
            self._store(lambda: (self.store.message(mid), len(self.store.siblings(mid))),
                        lambda r: self._begin_edit(mid, r[0].content, r[1] + 1))
        elif name == "delete":
            self._store(lambda: self.store.delete_message(mid), lambda _c: self.reload())
        elif name == "branch":
            self._store(lambda: self.store.switch_branch(mid), lambda _c: self.reload())

    def _begin_edit(self, mid: int, text: str, versions: int) -> None:
        """Edit mode: the composer holds the message (banner, Esc cancels) and the message is highlighted."""
        self._edit_ended()
        self.w.composer.begin_edit(mid, text, versions)
        widget = self.w.view.widgets.get(mid)
        if widget is not None:
            widget.highlight(True)
            self._edited = mid

    def _edit_ended(self) -> None:
        widget = self.w.view.widgets.get(self._edited) if self._edited is not None else None
        if widget is not None:
            widget.highlight(False)
        self._edited = None

    def regenerate_last(self) -> None:
        last = next((m for m in reversed(self.w.view.messages) if m.role == "assistant"), None)
        if last is not None:
            self.message_action("regenerate", last.id)

    # ----- context meter ---------------------------------------------------------------------------------

    def update_meter(self, draft: str | None = None) -> None:
        """Count tokens of the branch (+ draft) on the engine lane; only the latest request is shown."""
        if self.current is None or not self.model_ready:
            return
        self._count_seq += 1
        seq, cid = self._count_seq, self.current.id
        draft = self.w.composer.text() if draft is None else draft

        def job() -> tuple[FitReport, int] | None:
            if seq != self._count_seq:
                return None  # a newer request superseded this one while it waited
            return self.service.check_fit(cid, draft or None), (self.service.count([{"role": "user", "content":
                                                                                     draft}]) if draft else 0)

        self._engine(job, lambda r: self._show_meter(seq, r), lambda exc: log.warning("token count: %s", exc))

    def _show_meter(self, seq: int, r: tuple[FitReport, int] | None) -> None:
        if r is None or seq != self._count_seq:
            return
        fit, draft_tokens = r
        self.last_fit = fit
        w = self.w
        w.meter.setValue(int(min(1.0, fit.fraction) * 1000))
        w.meter.setProperty("warn", "true" if fit.warn else "false")
        w.meter.style().unpolish(w.meter)
        w.meter.style().polish(w.meter)
        state = "" if not fit.warn else " · almost full" if fit.fits else " · no longer fits"
        w.meter_label.setText(f"{fit.prompt_tokens:,} / {fit.n_ctx:,} tokens{state}")
        w.meter.setToolTip(
            "Context used by this chat (and your draft)." + (
                "" if not fit.warn else " Nearly full: when it no longer fits you choose what happens — a new "
                "chat from a summary, or dropping the oldest turns. Nothing is cut silently."))
        if not draft_tokens:
            w.composer.set_token_info("")
        elif not fit.fits:
            what = "too long for the context" if draft_tokens >= fit.n_ctx else "with it the chat no longer fits " \
                "the context"
            w.composer.set_token_info(f"{draft_tokens:,} tokens — {what} ({fit.n_ctx:,}); you will be asked what "
                                      "to do", warn=True)
        else:
            w.composer.set_token_info(f"{draft_tokens:,} tokens", warn=fit.warn)

    # ----- settings, files, theme ------------------------------------------------------------------------

    def open_settings(self) -> None:
        if self.current is None:
            self.toast("Start a chat first.")
            return
        models = [(e.name, f"{e.name}  ({e.size / MIB:,.0f} MiB)") for e in ModelStore().list()]
        dialog = ConversationSettingsDialog(self.current, models, self.w)
        if not dialog.exec():
            return
        model, system, settings = dialog.values()
        cid, old_model = self.current.id, self.current.model
        self._store(lambda: self.store.update(cid, model=model, system_prompt=system, settings=settings),
                    lambda conv: self._settings_saved(conv, old_model))

    def _settings_saved(self, conv: Conversation, old_model: str) -> None:
        self.current = conv
        if conv.model != old_model:
            self.switch_model(conv.model)
        self.update_meter()

    def switch_model(self, name: str, override: bool = False) -> None:
        self.model_ready = False
        self._loading_name = name
        self.w.status.model.setText(f"Loading {name}…")

        def job() -> dict[str, Any]:
            path = open_model(name or None)
            # n_seq_max=2 as at start-up: KV saves use the second sequence as scratch (context.build)
            params = load_params_for(path, settings=self.ctx.settings, n_seq_max=2, override=override)
            self.service.model_name = path.stem
            return self.ctx.engine.load(params)

        self._engine(job, self._loaded, self._load_failed)

    def export_chat(self, cid: int | None) -> None:
        cid = cid if cid is not None else (self.current.id if self.current else None)
        if cid is None:
            return
        path, _ = QFileDialog.getSaveFileName(self.w, "Export chat", str(Path.home() / "chat.md"),
                                              "Markdown (*.md);;JSON, re-importable (*.json)")
        if path:
            self._store(lambda: conversation_io.export_file(self.store, cid, Path(path)),
                        lambda p: self.toast(f"Exported to {p}"))

    def import_chat(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Import chat", str(Path.home()), "Hisho chat (*.json)")
        if path:
            self._store(lambda: conversation_io.import_file(self.store, Path(path)), self._created)

    def set_theme(self, name: str) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            theme.apply(app, theme.choose(name))
            self.reload()

    def follow_system_theme(self, *_: object) -> None:
        self.set_theme("system")

    def copy_diagnostics(self) -> None:
        e = self.ctx.engine
        lines = [f"engine: {e.engine_info}", f"load: {e.load_info}", f"params: {e.load_params}",
                 f"restarts: {e.restarts}", f"store read-only: {self.store.read_only}", f"problem: {self.ctx.problem}"]
        QGuiApplication.clipboard().setText("\n".join(lines))
        self.toast("Diagnostics copied to the clipboard.")

    # ----- closing -----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop a reply, let it be saved, save the draft, stop the engine. Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        start = time.perf_counter()
        if self.current is not None and not self.store.read_only:
            try:  # direct call: the store lane is about to shut down and this must not be lost
                self.store.update(self.current.id, draft=self.w.composer.draft_text())
            except UserError as exc:
                log.error("could not save the draft: %s", exc)
        self.stop()
        self.w.view.detach_stream()
        if not self.workers.shutdown(CLOSE_WAIT_S):
            self.ctx.engine.kill()  # a reply did not stop in time; its text so far is saved already
        self.ctx.engine.close()
        log.info("window closed in %.2fs", time.perf_counter() - start)
