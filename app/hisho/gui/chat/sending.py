"""Sending and streaming: what happens from Enter to the saved reply, one operation at a time.

Rules of use (the chat presenter owns one ``Sending``):
- It shows and reads the screen only through ``SendScreen``'s named methods, and uses of the presenter only what
  ``SendHost`` names (``hisho.gui.chat.send_screen``): never the window or its widgets.
- A send is one job on the engine lane (``ChatService.send_if_fits`` then ``run``): the prompt is built and
  tokenized once there, checked against the context, recorded and answered. The GUI thread is asked only when
  the prompt does not fit (the choice is the user's).
- Every send goes through one queue. Enter takes the text out of the message box at once (so a second Enter
  cannot send it again) and queues it; ``pump`` starts the first queued message as soon as the engine is free:
  no reply streaming, no summary running, the model loaded. While it waits, the message is shown below its chat
  with what it waits for and a Cancel that gives the text back. Each message is sent exactly once.
- One reply streams at a time (``active``). Its text has one owner, the ``Turn``: the view reads ``turn.text``;
  nothing else keeps a copy. The saved reply row of the streaming turn is never shown as a message of its own
  (``hide_streaming_row``), so switching away and back shows the reply once.
- The composer shows Stop only in the chat whose reply is streaming (``generating_here``).
- ``live`` holds the streaming reply's figures (tokens, first-token time), written on the engine lane and read
  by the status bar's timer. Time to first token counts from the moment the message left the queue (Send,
  unless it waited for another chat's reply, a wait it shows apart), so the reading of the prompt is in it.
- While the engine reads a long prompt (type-ahead of the message, or the reply's own prefill) the wait says
  how far it is ("Reading your message · 37 %", ``hisho.gui.chat.waits``), and Stop works: a message not yet
  recorded goes back to the message box and its reading is cancelled; a recorded one stops like any reply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox

from hisho.core.conversations.chat import FitReport, PreparedPrompt, Turn, TurnResult
from hisho.core.conversations.store import STREAMING, Conversation, Message
from hisho.core.engine.protocol import Progress
from hisho.gui.chat.send_queue import LiveFigures, Queued
from hisho.gui.chat.waits import ReadingWatch, reading_text

if TYPE_CHECKING:
    from hisho.gui.chat.send_screen import FitMemory, SendHost, SendScreen

log = logging.getLogger("hisho.gui")

CONTINUE_FROM_SUMMARY = "Continue from a summary"
# The outgrown chat's choice, in one sentence: the default keeps every answer and reads nothing twice.
OUTGROWN_ADVICE = ("Nothing has been cut: continuing from a summary (recommended) starts a new chat from a summary "
                   "of this one, written on what the model already holds, while dropping the oldest turns makes "
                   "the model read this chat again without them.")
LIVE_MS = 500  # how often the status bar and the meter show the streaming reply's figures


class Sending:
    """Sends the messages of the chat presenter (``chat``) and shows them on ``screen``; ``fit`` keeps each
    chat's context figures, ``edit_ended`` takes the highlight off a message whose edit was sent."""

    def __init__(self, chat: SendHost, screen: SendScreen, fit: FitMemory,
                 edit_ended: Callable[[], None]) -> None:
        self.c = chat
        self.screen = screen
        self.fit = fit
        self._edit_ended = edit_ended
        self.service = chat.service
        self.queue: list[Queued] = []
        self.starting: Queued | None = None   # taken off the queue, not streaming yet (fit check, recording)
        self.active: Turn | None = None       # the streaming turn, as the GUI knows it
        self.running: Turn | None = None      # set by the engine lane while a turn runs
        self.live: LiveFigures | None = None
        self.remote_wait = ""                 # the remote engine the streaming reply waits on (no first byte yet)
        self._base_tokens: dict[int, int] = {}  # turn id -> prompt tokens when it started (the live meter)
        self._tick = QTimer(screen.window())
        self._tick.setInterval(LIVE_MS)
        self._tick.timeout.connect(self._show_live)
        self.reading = ReadingWatch(screen.window(), lambda: self.c.ctx.engine, self._reading_shown,
                                    self._show_reading)
        self.reading_text = ""                # what the wait says now ("Reading your message · 37 %")
        self._cancelled_reads: set[int] = set()

    # ----- state -----------------------------------------------------------------------------------------

    def busy_with(self) -> str:
        """What a new message would wait for ("" when the engine is free)."""
        turn = self.active or self.running
        source = turn if turn is not None else self.starting
        if source is not None:
            cid = source.conversation_id
            here = self.c.current is not None and self.c.current.id == cid
            what = "the reply above" if here else f"the reply in “{self.c.title_of(cid)}”"
            return f"{self.remote_wait} to start {what}" if self.remote_wait else what
        summary = self.screen.summary_running()
        if summary is not None:
            return f"the summary of {summary}"
        if not self.c.model_ready:
            connecting = self.c.ctx.state.now.connecting   # the remote engine being connected to, if any
            return f"{connecting} to answer" if connecting else "the model to load"
        return ""

    def waiting_on_remote(self, name: str) -> None:
        """A remote engine has not sent the streaming reply's first byte for a while (``RemoteEngine.on_wait``;
        "" once it has): say what the send waits for — in the status bar, on the reply, and on the messages
        queued behind it (the same "Waiting for …")."""
        if not name:
            if self.remote_wait:
                self.screen.clear_status("Waiting for ")
            self.remote_wait = ""
            self.show_queue()
            return
        turn = self.active or self.running
        if turn is None:
            return                           # the notice came after the reply ended
        self.remote_wait = name
        self.screen.show_status(f"Waiting for {self.busy_with()}…")
        self.screen.stream_waiting(turn.id, f"waiting for {name}…")
        self.show_queue()

    def generating_here(self) -> bool:
        """A reply of the chat on screen is starting or streaming (the message box offers Stop)."""
        cur = self.c.current
        turn = self.active or self.running
        if cur is None:
            return False
        if turn is not None:
            return turn.conversation_id == cur.id
        return self.starting is not None and self.starting.conversation_id == cur.id and not self.starting.stopped

    def hide_streaming_row(self, branch: list[Message]) -> list[Message]:
        """The branch without the row the streaming reply is being saved into (the stream widget shows it)."""
        turn = self.active or self.running
        if turn is None:
            return branch
        return [m for m in branch if m.id != turn.reply_id and not (m.status == STREAMING and m.parent_id ==
                                                                    turn.parent_id)]

    def show_in_view(self, conv_id: int, branch: list[Message]) -> None:
        """After the view showed ``branch`` of ``conv_id``: the streaming reply and the waiting messages."""
        turn = self.active
        if turn is not None and turn.conversation_id == conv_id and (
                not branch or branch[-1].id == turn.parent_id):
            self.screen.show_stream(turn)
        self.show_queue()
        self.screen.set_sending(self.generating_here())

    # ----- sending ---------------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        if not text.strip() and not self.screen.images_waiting():
            return
        if self.c.model_failed:
            self.c.toast("No model is loaded (see the message at the top); your message is kept.")
            return
        current = self.c.current
        if current is None:
            self.c.store_job(lambda: self.c.service.new_conversation(),
                             lambda conv: self._created_for_send(conv, text))
            return
        editing = self.screen.editing_id()
        if editing is not None:
            self.screen.end_edit()  # what was typed before the edit comes back
            self._edit_ended()
        else:
            self.screen.clear_draft()
        images = self.screen.take_images() if editing is None else []
        self.queue.append(Queued(current.id, text, editing, images=images))
        self.pump()

    def _created_for_send(self, conv: Conversation, text: str) -> None:
        self.c.current = conv
        self.c.refresh(conv.id)
        self.screen.mark_listed(conv.id)
        self.screen.show_branch(conv.id, [], {})
        self.send(text)

    def pump(self) -> None:
        """Start the next queued message if the engine is free; else say what each one waits for."""
        if self.queue and not self.busy_with():
            self._dispatch(self.queue.pop(0))
        self.show_queue()

    def show_queue(self) -> None:
        cur = self.c.current
        if cur is None:
            return
        waiting = self.busy_with() or "its turn"
        items = [(q.key, q.text, f"Waiting for {waiting} · sent when it finishes") for q in self.queue
                 if q.conversation_id == cur.id]
        if self.starting is not None and self.starting.conversation_id == cur.id:
            state = "Stopping…" if self.starting.stopped else self.reading_text or "Sending…"
            items.insert(0, (self.starting.key, self.starting.text, state))
        self.screen.show_queued(items)

    def cancel_queued(self, key: int) -> None:
        """The waiting message is not sent; its text goes back to the message box (nothing is lost)."""
        if self.starting is not None and self.starting.key == key:
            self.stop_starting()
            return
        item = next((q for q in self.queue if q.key == key), None)
        if item is None:
            return
        self.queue.remove(item)
        self._give_back(item)
        self.show_queue()

    def _give_back(self, item: Queued) -> None:
        cur = self.c.current
        if cur is not None and cur.id == item.conversation_id and self.screen.editing_id() is None:
            typed = self.screen.draft()
            self.screen.set_draft(item.text if not typed.strip() else item.text + "\n\n" + typed)
            self.screen.put_images(item.images)
        else:
            self.c.store_job(lambda: self.c.store.update(item.conversation_id, draft=item.text))
            self.c.toast("Your message was not sent; it is back in that chat's message box.")

    def _dispatch(self, item: Queued) -> None:
        self.starting = item
        item.started_at = time.monotonic()
        self.reading_text = ""
        self.reading.start()
        self.screen.set_sending(self.generating_here())
        cid, text, images = item.conversation_id, item.text, item.images
        if item.editing is not None:
            editing = item.editing
            self._start_turn(lambda: self.service.edit(editing, text))
            return
        self._start_turn(lambda: self.service.send_if_fits(cid, text, images))

    def _not_started(self, item: Queued, exc: BaseException | None) -> None:
        self.starting = None
        self.reading_text = ""
        self._give_back(item)
        if item.stopped and self.screen.draft() != item.text:
            # Held at the Stop; held again only where the box now holds more (text typed since, below it).
            self._hold_draft(item.conversation_id)
        self.screen.set_sending(self.generating_here())
        if exc is not None:
            self.c.report(exc)
        self.pump()

    def _fit_checked(self, item: Queued, fit: FitReport) -> None:
        cid, text, images = item.conversation_id, item.text, item.images
        self.fit.remember(cid, fit)
        if item.stopped:
            self._not_started(item, None)
            return
        if fit.fits:  # it fits now (the chat changed since): send as usual
            self._start_turn(lambda: self.service.send_if_fits(cid, text, images))
            return
        box = QMessageBox(self.screen.window())
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("This chat no longer fits the context")
        box.setText(f"The conversation with your message is {fit.prompt_tokens:,} tokens; the model's context "
                    f"holds {fit.n_ctx:,} (and a reply needs about {fit.reply_tokens:,} more).")
        box.setInformativeText(OUTGROWN_ADVICE)
        summary = box.addButton(CONTINUE_FROM_SUMMARY, QMessageBox.ButtonRole.AcceptRole)
        drop = box.addButton("Drop the oldest turns", QMessageBox.ButtonRole.ActionRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(summary)   # Enter keeps the promise: nothing read again, no answer changed
        box.exec()
        if box.clickedButton() is drop:
            self._start_turn(lambda: self.service.send(cid, text, drop_oldest=True, images=images))
        elif box.clickedButton() is summary:
            # No timeout: the summary can take a while, and the next message (done or failed) replaces this one.
            self.screen.show_status("Writing a summary of this chat for a new one… your message is kept.")
            self.c.engine_job(lambda: self.service.summarize_into_new(cid),
                              lambda new_id: self._summarized(item, new_id),
                              lambda exc: self._not_started(item, exc))
        else:
            self._not_started(item, None)

    def _summarized(self, item: Queued, new_id: int) -> None:
        """The message moves with the user: it becomes the new chat's draft, ready to send."""
        self.starting = None
        text = item.text

        def opened(_: object) -> None:
            self.c.refresh(new_id)
            self.c.select(new_id)
            self.screen.clear_status()
            self.c.toast("Started a new chat from a summary; your message is ready to send.")
            self.pump()

        self.c.store_job(lambda: self.c.store.update(new_id, draft=text), opened)

    def _start_turn(self, make: Callable[[], Turn | tuple[Turn, PreparedPrompt] | FitReport]) -> None:
        """Record the user's side, then stream the reply: one job on the engine lane. ``make`` may return the
        turn with its prepared prompt (a send), or a ``FitReport`` when that prompt does not fit (nothing was
        recorded; the user is asked). A message stopped while it waited is not sent (its text goes back)."""
        item = self.starting
        started = item.started_at if item is not None else time.monotonic()
        live = LiveFigures(started)

        def job() -> TurnResult | FitReport | None:
            if item is not None and item.stopped:
                return None  # stopped while it waited: nothing recorded, the text goes back
            made = make()
            if isinstance(made, FitReport):
                return made
            turn, prompt = made if isinstance(made, tuple) else (made, None)
            turn.sent_at = started
            self.running = turn  # visible to stop()/shutdown() before the GUI hears of the turn
            branch = self.c.store.branch(turn.conversation_id, turn.parent_id)
            siblings = {m.id: self.c.store.siblings(m.id) for m in branch}
            fit = prompt.fit if prompt is not None else None
            self.c.ctx.executor.post(lambda: self._began(turn, live, branch, siblings, fit))
            try:
                return self.service.run(turn, live.on_text, prompt, on_reasoning=live.on_reasoning)
            finally:
                self.running = None

        def done(out: TurnResult | FitReport | None) -> None:
            if out is None:
                assert item is not None
                self._not_started(item, None)
            elif isinstance(out, FitReport):
                assert item is not None
                self._fit_checked(item, out)
            else:
                self._finished(out)

        self.c.engine_job(job, done, lambda exc: self._turn_failed(exc, item))

    def regenerate(self, reply_id: int) -> None:
        if self.busy_with():
            self.c.toast(f"Wait for {self.busy_with()} to finish, or stop it.")
            return
        self.starting = Queued(self.c.current.id if self.c.current else 0, "")
        self._start_turn(lambda: self.service.regenerate(reply_id))

    def _began(self, turn: Turn, live: LiveFigures, branch: list[Message], siblings: dict[int, list[int]],
               fit: FitReport | None) -> None:
        self.starting = None
        self.active = turn
        self.live = live
        self.reading_text = ""
        if fit is not None:
            self.fit.remember(turn.conversation_id, fit)
            self._base_tokens[turn.id] = fit.prompt_tokens
        cur = self.c.current
        if cur is not None and cur.id == turn.conversation_id:
            self.screen.show_branch(turn.conversation_id, self.hide_streaming_row(branch), siblings)
            self.show_in_view(cur.id, branch)
        self._tick.start()
        self._show_live()
        self.reading.start()
        self.c.refresh()  # the chat's title and place in the list may have changed

    def _show_live(self) -> None:
        live = self.live
        if live is None:
            self._tick.stop()
            return
        tokens, speed, ttft = live.figures()
        if tokens and self.remote_wait:
            self.waiting_on_remote("")       # the first words came: nothing is waited for any more
        self.screen.show_reply_figures(speed, ttft, live=True, answer=live.answer_after())
        if self.c.current is not None:
            self.fit.show_live(self.c.current.id)

    def live_tokens(self, cid: int) -> tuple[int, int] | None:
        """(prompt tokens when the reply started, tokens streamed since) for the chat streaming now."""
        turn, live = self.active, self.live
        if turn is None or live is None or turn.conversation_id != cid or turn.id not in self._base_tokens:
            return None
        return self._base_tokens[turn.id], live.figures()[0]

    def _finished(self, result: TurnResult) -> None:
        turn = result.turn
        self.active, self.live = None, None
        self._base_tokens.pop(turn.id, None)
        m = result.message
        self._tick.stop()
        self.waiting_on_remote("")
        # A reply that ended inside its thinking has no answer to time.
        answer = m.ttft_s + m.reasoning_s if m.ttft_s is not None and m.reasoning_s and m.content.strip() else None
        self.screen.show_reply_figures(m.tokens_per_s, m.ttft_s, answer=answer)
        cur = self.c.current
        if cur is not None and cur.id == turn.conversation_id:
            self.screen.end_stream(turn.id, m)
            self.c.reload()  # sibling counts and the title may have changed
        if result.error:
            self.c.toast(result.error)
        self.c.refresh()
        self.fit.update()
        self.screen.set_sending(self.generating_here())
        self.screen.reply_saved(result)
        self.pump()

    def _turn_failed(self, exc: BaseException, item: Queued | None) -> None:
        began = self.active is not None
        self.active, self.live, self.starting = None, None, None
        self._tick.stop()
        self.waiting_on_remote("")
        self.screen.detach_stream()
        self.screen.set_sending(self.generating_here())
        if not began and item is not None and item.text:
            self._give_back(item)
        self.c.report(exc)
        self.c.reload()
        self.pump()

    def stop_here(self) -> None:
        """The user's Stop (the message box's button, Chat → Stop, Escape): the reply of the chat on screen
        only; in any other chat it does nothing (Chat → Stop stopped another chat's reply unseen)."""
        if self.generating_here():
            self.stop()

    def stop(self) -> None:
        """Stop whatever reply runs, in any chat (closing the window)."""
        turn = self.running or self.active
        if turn is None:
            self.stop_starting()
        if turn is not None:
            turn.cancel()
            # seen at once; the saved reply replaces it when the engine stops
            self.screen.stream_waiting(turn.id, "stopping…")

    # ----- the wait while the engine reads the prompt -------------------------------------------------------

    def stop_starting(self) -> None:
        """Stop a message that left the queue but whose reply has not begun (its prompt being read): it is not
        sent, its text goes back to the message box once the engine lets go of it."""
        item = self.starting
        if item is None or item.stopped:
            return
        item.stopped = True
        # Type-ahead queued behind the reading (the draft with the template's end-of-turn, held back for the
        # typing pause) is dropped now: once the send gives up, the engine would read the whole message again.
        self._hold_draft(item.conversation_id, item.text)
        self.reading.start()  # cancels the reading at its next report (``_show_reading``)
        self.show_queue()
        self.screen.set_sending(self.generating_here())

    def _hold_draft(self, cid: int, text: str | None = None) -> None:
        """After a Stop, ``text`` (default: the draft given back to the chat on screen) is not read again by
        type-ahead until the user changes it, and type-ahead jobs not started yet are dropped."""
        kv = getattr(self.c.ctx, "kv", None)
        if kv is None:
            return
        if text is None:
            cur = self.c.current
            if cur is None or cur.id != cid:
                return
            text = self.screen.draft()
        kv.hold_draft(cid, text)

    def _reading_shown(self) -> bool:
        """Is a wait on the engine's reading on screen (a message starting, or a reply without a token)?"""
        if self.starting is not None:
            return True
        live = self.live
        return self.active is not None and live is not None and live.figures()[0] == 0

    def _show_reading(self, progress: Progress | None) -> None:
        item = self.starting
        if item is not None and item.stopped and progress is not None and progress.op == "prefill":
            if progress.id not in self._cancelled_reads:  # type-ahead of the stopped message: let it go
                self._cancelled_reads.add(progress.id)
                self.c.ctx.engine.cancel(progress.id)
        text = reading_text(progress, self.screen.attachment_count())
        if text == self.reading_text:
            return
        self.reading_text = text
        if item is not None:
            self.show_queue()
            return
        turn = self.active
        if turn is not None and not turn.cancelled:
            self.screen.stream_waiting(turn.id, text[0].lower() + text[1:] if text else "generating…")

    def forget(self, conversation_id: int) -> list[Queued]:
        """A chat is deleted: its waiting messages go with it (returned, so Undo can bring them back)."""
        gone = [q for q in self.queue if q.conversation_id == conversation_id]
        self.queue = [q for q in self.queue if q.conversation_id != conversation_id]
        return gone

    def close(self) -> None:
        """Closing: waiting messages become their chats' drafts (nothing typed is lost)."""
        for item in self.queue:
            try:
                conv = self.c.store.get(item.conversation_id)
                draft = item.text if not conv.draft.strip() else item.text + "\n\n" + conv.draft
                self.c.store.update(item.conversation_id, draft=draft)
            except Exception as exc:  # the window is closing: log, never raise
                log.error("could not keep a waiting message: %s", exc)
        self.queue.clear()
