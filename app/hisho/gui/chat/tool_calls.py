"""A reply's tool calls where they happened: one row per call (the tool, its arguments, the folded result, the
time it ran, its state), the text the model wrote before each round, and the question a call waiting for the
person asks (Allow once / Always allow this tool / Deny).

Rules of use (GUI thread): ``ToolCallsBlock.show(rounds, pending)`` draws the stored rounds (``Message.tool_calls``
read by ``hisho.core.conversations.tool_rounds.load``, or ``Turn.rounds`` while a reply runs) and the calls not
yet in a round (``PendingCall``); it rebuilds only when what it shows changed. ``attach(widget, block)`` puts a
block above a message's answer. Everything the tool or the model wrote is shown as plain text, never markup.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from hisho.core.conversations import tool_rounds as rounds_mod
from hisho.core.tools.approvals import ALWAYS, DENY, ONCE, CallRequest

WAITING, RUNNING = "waiting", "running"
STATE_WORDS = {WAITING: "waiting for you", RUNNING: "running", rounds_mod.OK: "done", rounds_mod.ERROR: "failed",
               rounds_mod.DENIED: "denied", rounds_mod.REFUSED: "refused", rounds_mod.STOPPED: "stopped"}
ARGS_SHOWN = 4000      # characters of arguments shown (the prompt shows them whole)
RESULT_SHOWN = 20_000  # characters of a result shown in its fold


@dataclass
class PendingCall:
    """A call the person is asked about, or that runs after they allowed it (not in a round yet)."""

    key: int
    request: CallRequest
    turn_id: int
    round: int                  # how many rounds the turn had when it was asked: a later round holds it
    state: str = WAITING        # waiting, running, denied
    asked_at: float = field(default_factory=time.monotonic)
    answered_at: float | None = None


def _plain(text: str, name: str = "") -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if name:
        label.setObjectName(name)
    return label


def arguments_text(arguments: Any) -> str:
    """Arguments as the person reads them: indented JSON (a string that is not JSON as it is)."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments or "{}")
        except ValueError:
            return arguments
    return json.dumps(value, ensure_ascii=False, indent=1)


class CallRow(QFrame):
    """One call: ``tool · state · time``, its arguments, its result folded; a waiting call has the three
    answers (``answer(choice)``)."""

    def __init__(self, name: str, server: str, arguments: Any, state: str, *, result: str = "",
                 seconds: float | None = None, answer: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.setObjectName("ToolCall")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.state = state
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        lay.setSpacing(4)
        head = f"Tool {name}" + (f" ({server})" if server else "") + f" · {STATE_WORDS.get(state, state)}"
        if seconds is not None:
            head += f" · {seconds:.2f} s" if seconds < 1 else f" · {seconds:.1f} s"
        self.head = _plain(head, "ToolCallHead")
        lay.addWidget(self.head)
        args = arguments_text(arguments)
        if answer is None and len(args) > ARGS_SHOWN:
            args = args[:ARGS_SHOWN] + f"\n… ({len(args) - ARGS_SHOWN:,} more characters)"
        self.args = _plain(args, "ToolCallArgs")
        lay.addWidget(self.args)
        self.result = _plain(result if len(result) <= RESULT_SHOWN else
                             result[:RESULT_SHOWN] + f"\n… ({len(result) - RESULT_SHOWN:,} more characters)",
                             "ToolCallResult")
        self.result.hide()
        self.fold: QPushButton | None = None
        if result:
            self.fold = QPushButton("Show result")
            self.fold.setObjectName("ToolCallFold")
            self.fold.setFlat(True)
            self.fold.clicked.connect(self.toggle)
            lay.addWidget(self.fold, 0, Qt.AlignmentFlag.AlignLeft)
            lay.addWidget(self.result)
        self.buttons: dict[str, QPushButton] = {}
        if answer is not None:
            row = QHBoxLayout()
            row.setSpacing(6)
            for choice, words in ((ONCE, "Allow once"), (ALWAYS, "Always allow this tool"), (DENY, "Deny")):
                button = QPushButton(words)
                button.setObjectName(f"ToolAnswer_{choice}")
                button.clicked.connect(lambda _=False, c=choice: answer(c))
                row.addWidget(button)
                self.buttons[choice] = button
            row.addStretch(1)
            lay.addLayout(row)

    def toggle(self) -> None:
        shown = not self.result.isVisible()
        self.result.setVisible(shown)
        if self.fold is not None:
            self.fold.setText("Hide result" if shown else "Show result")


class ToolCallsBlock(QWidget):
    """A reply's rounds of calls (above its answer) and the calls still pending."""

    def __init__(self, answer: Callable[[int, str], None] | None = None) -> None:
        super().__init__()
        self.setObjectName("ToolCalls")
        self._answer = answer
        self._shown: Any = None
        self.rows: list[CallRow] = []
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 4)
        self.lay.setSpacing(6)

    def show_rounds(self, rounds: list[dict[str, Any]], pending: list[PendingCall] | None = None) -> None:
        pending = pending or []
        now = time.monotonic()
        key = (json.dumps(rounds, sort_keys=True, default=str), [(p.key, p.state) for p in pending])
        if key == self._shown:
            if pending:
                self._tick(pending, now)
            return
        self._shown = key
        while self.lay.count():
            item = self.lay.takeAt(0)
            w = item.widget() if item is not None else None
            if w is not None:
                w.setParent(None)
                w.deleteLater()
        self.rows = []
        for r in rounds:
            content = str(r.get("content", "")).strip()
            if content:
                self.lay.addWidget(_plain(content, "ToolRoundText"))
            for c in r.get("calls", []):
                seconds = c.get("seconds")
                self._add(CallRow(str(c.get("name", "")), str(c.get("server", "")), c.get("arguments", ""),
                                  str(c.get("status", "")), result=str(c.get("result", "")),
                                  seconds=float(seconds) if isinstance(seconds, (int, float)) else None))
        for p in pending:
            answer: Callable[[str], None] | None = None
            if p.state == WAITING and self._answer is not None:
                answer = functools.partial(self._answer, p.key)
            self._add(CallRow(p.request.name, p.request.server, p.request.arguments, p.state, answer=answer))
        self._tick(pending, now)

    def _add(self, row: CallRow) -> None:
        self.rows.append(row)
        self.lay.addWidget(row)

    def _tick(self, pending: list[PendingCall], now: float) -> None:
        """A running call's time so far."""
        live = self.rows[len(self.rows) - len(pending):] if pending else []
        for row, p in zip(live, pending, strict=False):
            if p.state == RUNNING and p.answered_at is not None:
                head = row.head.text().split(" · ")
                row.head.setText(" · ".join(head[:2] + [f"{now - p.answered_at:.0f} s"]))


def attach(widget: QWidget, block: ToolCallsBlock) -> None:
    """Put ``block`` above a message's answer (``MessageWidget``: its ``column``, before its ``card``)."""
    column = getattr(widget, "column", None)
    card = getattr(widget, "card", None)
    extras = getattr(widget, "extras", None)
    if not isinstance(column, QVBoxLayout) or card is None or not isinstance(extras, dict):
        return
    old = extras.pop("tools", None)
    if old is not None and old is not block:
        old.setParent(None)
        old.deleteLater()
    extras["tools"] = block
    column.insertWidget(column.indexOf(card), block)
