"""A chat turn's records: the ``Turn`` being answered, its ``PreparedPrompt``, the ``TurnResult``, the
``FitReport`` of a prompt against the context, and the ``Write`` the service stores through. No Qt.

``hisho.core.conversations.chat`` re-exports every name here; import from there.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from hisho.core.conversations.store import Message
from hisho.core.db import DatabaseUnavailable
from hisho.core.engine.protocol import GenerationResult, Sampling
from hisho.core.engine.seam import TokenStream

WARN_FRACTION = 0.8          # the context meter turns amber from here
MIN_REPLY_TOKENS = 256        # room kept for a reply when judging whether a prompt fits
SAVE_EVERY_S = 1.0
DEFAULT_TITLE = "New chat"


@dataclass
class FitReport:
    prompt_tokens: int
    reply_tokens: int        # room kept for the reply
    n_ctx: int

    @property
    def fraction(self) -> float:
        return self.prompt_tokens / self.n_ctx if self.n_ctx else 0.0

    @property
    def fits(self) -> bool:
        return self.prompt_tokens + self.reply_tokens <= self.n_ctx

    @property
    def warn(self) -> bool:
        return self.fraction >= WARN_FRACTION or not self.fits


_turn_ids = itertools.count(1)
T = TypeVar("T")


class Write(Protocol):
    """Runs a store write where the database's one writer is (``Executor.call("store", fn)``)."""

    def __call__(self, fn: Callable[[], T]) -> T: ...


@dataclass
class Turn:
    """One reply to produce. ``id`` is unique per process, so late events can be matched to their request."""

    conversation_id: int
    parent_id: int                     # the user message the reply answers
    sampling: Sampling
    drop_oldest: bool = False
    id: int = field(default_factory=lambda: next(_turn_ids))
    text: str = ""
    reasoning: str = ""                # a reasoning model's thinking so far (never part of ``text``)
    template_kwargs: dict[str, Any] | None = None  # the template's variables for this turn (thinking on/off)
    reply_id: int | None = None
    store_error: DatabaseUnavailable | None = None   # the store failed while this reply streamed (disk full)
    # Time to first token counts from ``sent_at`` (time.monotonic: when the user sent it; the window sets when
    # its message left the send queue), so everything the send waited for, the prompt's reading included, is in.
    sent_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    answer_at: float | None = None     # the answer's first token (after any thinking)
    rounds: list[dict[str, Any]] = field(default_factory=list)  # tool calls made so far (Message.tool_calls)
    steps: list[dict[str, Any]] = field(default_factory=list)   # each generation's token counts (tool loop)
    tool_error: str = ""               # why the tool loop stopped early (saved as the reply's note)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _stream: TokenStream | None = field(default=None, repr=False)

    def cancel(self) -> None:
        self._cancelled.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


@dataclass
class PreparedPrompt:
    """A turn's prompt, built once: ``messages`` as the model sees them and, on an engine that takes token ids
    (this computer's), their ``tokens`` (None on a remote engine, which renders its own template). ``fit``
    says whether they leave room for the reply."""

    messages: list[dict[str, Any]]
    tokens: list[int] | None
    fit: FitReport
    tools: list[dict[str, Any]] | None = None   # the tools the prompt carries (the tool loop's)


@dataclass
class TurnResult:
    turn: Turn
    message: Message
    prompt_messages: list[dict[str, str]]
    error: str = ""
    engine: GenerationResult | None = None   # the engine's own figures (its ttft_s is its prefill + first token)


# Tokens a reasoning model may think for before its answer's own budget (``max_tokens``) begins: thinking does
