"""Tools in the window's chats: the MCP servers started with the window, the person's answer to each call, and
each call shown where it happened in the reply (docs/tools.md).

Rules of use (GUI thread, one ``ChatTools`` per window, a child of it: a screen finds it with
``window.findChild(ChatTools)``):
- ``start()`` turns tools on when servers are configured (``Services.use_tools``); ``restart(servers)`` saves a
  changed list and starts it again (an op: stopping servers waits on them). ``Services.close`` stops them.
- ``approve`` is the core's ``Approve`` callback: the tool loop calls it on the engine lane; it shows the question
  in the reply (a call row with Allow once / Always allow this tool / Deny) and blocks that thread until the
  person answers, or the reply is stopped (then the call is denied and the reply ends).
- ``states_changed`` fires on the GUI thread when a server's state changes or the servers restart.
- The reply streaming shows its rounds (``Turn.rounds``) and pending calls, refreshed by a timer while it runs; a
  saved reply shows its stored calls (``Message.tool_calls``) when the view builds it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from hisho.core.conversations import tool_rounds
from hisho.core.tools import config as tool_config
from hisho.core.tools.approvals import DENY, CallRequest
from hisho.core.tools.loop import unavailable
from hisho.core.tools.manager import ServerState, ToolInfo
from hisho.gui import ops
from hisho.gui.chat.tool_calls import RUNNING, WAITING, PendingCall, ToolCallsBlock, attach

if TYPE_CHECKING:
    from hisho.core.conversations.chat import Turn
    from hisho.core.services import Services
    from hisho.gui.chat.chat_view import ChatView

log = logging.getLogger("hisho.gui")

TICK_MS = 200


class _Running(Protocol):
    running: Turn | None        # set on the engine lane as a reply starts
    active: Turn | None         # the reply the GUI shows streaming


class _HasSending(Protocol):
    @property
    def sending(self) -> _Running: ...


class ToolsHost(Protocol):
    """What the tools use of the window: the services, the chat view, the reply running."""

    @property
    def ctx(self) -> Services: ...

    @property
    def view(self) -> ChatView: ...

    @property
    def controller(self) -> _HasSending: ...

    def window(self) -> QWidget: ...


class ChatTools(QObject):
    states_changed = Signal()
    settings_requested = Signal()
    _posted = Signal()

    def __init__(self, host: ToolsHost) -> None:
        super().__init__(host.window())
        self.setObjectName("ChatTools")
        self.host = host
        self.ctx = host.ctx
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self.pending: dict[int, PendingCall] = {}
        self._events: dict[int, threading.Event] = {}
        self._answers: dict[int, str] = {}
        self.states: dict[str, ServerState] = {}
        self._asking_on: QWidget | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.refresh_stream)
        self._timer.start()
        self._posted.connect(self._changed)
        host.view.inserted.connect(self.decorate)

    # ----- the servers ----------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.ctx.tools is not None

    def start(self, servers: list[tool_config.ServerConfig] | None = None) -> None:
        """Tools on, when servers are configured (or ``servers`` given); else nothing runs."""
        servers = tool_config.load_servers() if servers is None else servers
        if not servers:
            return
        self.ctx.use_tools(self.approve, servers, on_state=self._on_state)
        self.states = {s.name: ServerState(s.name, "starting") for s in servers if s.enabled}
        self.states_changed.emit()

    def restart(self, servers: list[tool_config.ServerConfig]) -> None:
        """Save ``servers`` (tokens stored apart) and run them instead of the ones running."""
        def job() -> None:
            tool_config.save_servers(servers)
            self.ctx.stop_tools()

        def started(_: object) -> None:
            self.states = {}
            self.start([s for s in tool_config.load_servers()])
            self.states_changed.emit()

        ops.tool_servers(self.ctx.executor, job).success(started).run()

    def _on_state(self, state: ServerState) -> None:   # the manager's thread
        def show() -> None:
            self.states[state.name] = state
            self.states_changed.emit()
        self.ctx.executor.post(show)

    def tools(self) -> list[ToolInfo]:
        loop = self.ctx.tools
        return loop.manager.tools() if loop is not None else []

    def enabled_count(self) -> int:
        return sum(1 for t in self.tools() if t.enabled)

    def unavailable(self) -> str | None:
        """Why the model answering cannot call tools (None: it can)."""
        try:
            return unavailable(self.ctx.chat)
        except Exception as exc:   # no model loaded yet
            log.debug("tool format unknown: %s", exc)
            return None

    # ----- the person's answer (the engine lane) -----------------------------------------------------------

    def approve(self, request: CallRequest) -> str:
        turn = self.host.controller.sending.running
        key = next(self._keys)
        event = threading.Event()
        call = PendingCall(key, request, turn.id if turn is not None else 0, len(turn.rounds) if turn else 0)
        with self._lock:
            self.pending[key] = call
            self._events[key] = event
        self._posted.emit()
        while not event.wait(0.1):
            if turn is None or turn.cancelled:
                self._answers[key] = DENY
                break
        with self._lock:
            answer = self._answers.pop(key, DENY)
            self._events.pop(key, None)
            call.state = RUNNING if answer != DENY else tool_rounds.DENIED
            call.answered_at = time.monotonic()
        self._posted.emit()
        log.info("tool call %s: the person answered %s", request.name, answer)
        return answer

    def answer(self, key: int, choice: str) -> None:
        """The person's answer to a waiting call (GUI thread)."""
        with self._lock:
            event = self._events.get(key)
            if event is None:
                return
            self._answers[key] = choice
        event.set()

    def _changed(self) -> None:
        self.refresh_stream()

    # ----- the calls in the view ---------------------------------------------------------------------------

    def decorate(self, widget: QWidget) -> None:
        """A saved reply the view built: its stored calls above its answer."""
        message = getattr(widget, "message", None)
        stored = getattr(message, "tool_calls", "")
        if message is None or not stored:
            return
        rounds = tool_rounds.load(stored)
        if rounds:
            block = ToolCallsBlock()
            block.show_rounds(rounds)
            attach(widget, block)

    def pending_for(self, turn: Turn) -> list[PendingCall]:
        with self._lock:
            for k in [k for k, p in self.pending.items() if p.turn_id == turn.id and p.round < len(turn.rounds)]:
                del self.pending[k]
            return [p for p in self.pending.values() if p.turn_id == turn.id]

    def refresh_stream(self) -> None:
        sending = self.host.controller.sending
        turn = sending.active or sending.running
        with self._lock:
            if turn is None:
                self.pending = {k: p for k, p in self.pending.items() if k in self._events}
        view = self.host.view
        widget = view.stream_widget
        if turn is None or widget is None or view.stream_turn != turn.id:
            return
        pending = self.pending_for(turn)
        asking = any(p.state == WAITING for p in pending) and not turn.cancelled
        said = self._asking_on is widget      # the reply's line says it waits for you, then goes back
        if asking and not said:
            self._asking_on = widget
            widget.set_waiting("waiting for your answer about a tool call")
        elif not asking and said:
            self._asking_on = None
            widget.set_waiting("stopping…" if turn.cancelled else "generating…")
        rounds: list[dict[str, Any]] = list(turn.rounds)
        if not rounds and not pending:
            return
        block = widget.extras.get("tools")
        if not isinstance(block, ToolCallsBlock):
            block = ToolCallsBlock(self.answer)
            attach(widget, block)
        block.show_rounds(rounds, pending)
