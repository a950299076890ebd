"""What one send carries from the queue to its reply: the queued message (``Queued``) and the figures of the
reply being streamed (``LiveFigures``), used by ``hisho.gui.chat.sending.Sending``.

Rules of use: ``LiveFigures.on_text`` runs on the engine lane and ``figures`` on the GUI thread (the status
bar's timer), so its counters are read and written under its lock.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

_keys = itertools.count(1)


@dataclass
class Queued:
    conversation_id: int
    text: str
    editing: int | None = None          # a sent message being replaced by an edited version
    images: list[str] = field(default_factory=list)   # the names of its pictures (conversations.images)
    key: int = field(default_factory=lambda: next(_keys))
    started_at: float = field(default_factory=time.monotonic)  # left the queue (time to first token from here)
    stopped: bool = False               # the user stopped it before its reply began


class LiveFigures:
    """Speed of the reply being streamed. ``on_text`` runs on the engine lane (one call per token event)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.first: float | None = None
        self.last = self.started
        self.tokens = 0
        self.answer: float | None = None   # the answer's first word (a reasoning model thinks first)
        self._lock = threading.Lock()

    def on_text(self, _piece: str) -> None:
        self._token(answer=True)

    def on_reasoning(self, _piece: str) -> None:
        self._token(answer=False)

    def _token(self, *, answer: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if self.first is None:
                self.first = now
            if answer and self.answer is None:
                self.answer = now
            self.last = now
            self.tokens += 1

    def answer_after(self) -> float | None:
        """Seconds from the send to the answer's first word, when thinking came before it; else None."""
        with self._lock:
            first, answer = self.first, self.answer
        return answer - self.started if answer is not None and first is not None and answer > first else None

    def figures(self) -> tuple[int, float | None, float | None]:
        """(tokens so far, tokens/s after the first, seconds to the first token) — None where not known yet."""
        with self._lock:
            first, last, n = self.first, self.last, self.tokens
        ttft = first - self.started if first is not None else None
        speed = (n - 1) / (last - first) if first is not None and n > 1 and last > first else None
        return n, speed, ttft
