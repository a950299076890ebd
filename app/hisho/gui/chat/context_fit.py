"""The context meter and the draft's token count, per chat.

Rules of use:
- Each chat has its own figure: ``known[cid]`` is the last count made for it. Switching chats shows that chat's
  figure at once (or "counting…"), never the previous chat's; a count that comes back for a chat no longer on
  screen is remembered for it, not shown.
- Counts run on the engine lane; only the newest request is shown (older ones are skipped before they run).
- While a reply streams in the chat on screen, the meter shows the prompt the reply started from plus the tokens
  streamed so far (the engine is busy; counting again would wait for the reply to end).
- The meter counts what the model reads (system prompt, earlier messages, the chat template's markers, the
  draft); the composer shows the draft's own tokens, and both say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from hisho.core.conversations.chat import FitReport
from hisho.gui.chat.send_screen import PresenterBase

if TYPE_CHECKING:
    from hisho.gui.chat.composer import Composer
    from hisho.gui.chat.sending import Sending

log = logging.getLogger("hisho.gui")


class Meter(Protocol):
    """The header's context meter (the frame's ``ContextMeter``): a count, or that there is none yet."""

    def show_fit(self, fit: FitReport, live: bool = False) -> None: ...
    def show_unknown(self, text: str = "") -> None: ...


class FitHost(PresenterBase, Protocol):
    """What the counts use of the chat presenter: whether a model answers, the engine lane, the reply
    streaming (its tokens so far)."""

    @property
    def model_ready(self) -> bool: ...

    @property
    def sending(self) -> Sending: ...

    def engine_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None,
                   failed: Callable[[BaseException], Any] | None = None) -> None: ...


class ContextFit:
    """Shows figures on the header's context ``meter`` and under the ``composer`` (the draft's tokens)."""

    def __init__(self, chat: FitHost, meter: Meter, composer: Composer) -> None:
        self.c = chat
        self.service = chat.service
        self.meter, self.composer = meter, composer
        self.known: dict[int, FitReport] = {}
        self._seq = 0

    @property
    def last(self) -> FitReport | None:
        cur = self.c.current
        return self.known.get(cur.id) if cur is not None else None

    def remember(self, cid: int, fit: FitReport) -> None:
        self.known[cid] = fit

    def show_for(self, cid: int | None) -> None:
        """The chat on screen changed: show its own figure now; a fresh count follows."""
        fit = self.known.get(cid) if cid is not None else None
        if fit is not None:
            self.meter.show_fit(fit)
        else:
            self.meter.show_unknown("counting…" if cid is not None and self.c.model_ready else "")
        self.composer.set_token_info("")
        if cid is not None:
            self.show_live(cid)

    def show_live(self, cid: int) -> None:
        live = self.c.sending.live_tokens(cid)
        n_ctx = self.service.n_ctx
        if live is not None and n_ctx:
            base, streamed = live
            self.meter.show_fit(FitReport(base + streamed, 0, n_ctx), live=True)

    def update(self, draft: str | None = None) -> None:
        """Count the branch (+ draft) of the chat on screen on the engine lane."""
        cur = self.c.current
        if cur is None or not self.c.model_ready:
            return
        self._seq += 1
        seq, cid = self._seq, cur.id
        draft = self.composer.text() if draft is None else draft
        if not draft.strip():
            # An empty box has no tokens: say so now. The count below waits for the engine, which after a
            # send is writing the reply: the sent text's count stayed under the empty box until it ended.
            self.composer.set_token_info("")
        engine = self.service.engine

        def job() -> tuple[FitReport, int] | None:
            if seq != self._seq:
                return None  # a newer request superseded this one while it waited
            fit = self.service.check_fit(cid, draft or None)
            return fit, engine.count_tokens(draft) if draft.strip() else 0

        self.c.engine_job(job, lambda r: self._counted(seq, cid, r), lambda exc: log.warning("token count: %s", exc))

    def _counted(self, seq: int, cid: int, r: tuple[FitReport, int] | None) -> None:
        if r is None:
            return
        fit, draft_tokens = r
        self.known[cid] = fit
        cur = self.c.current
        if seq != self._seq or cur is None or cur.id != cid:
            return
        if self.c.sending.live_tokens(cid) is not None:
            self.show_live(cid)
        else:
            self.meter.show_fit(fit)
        composer = self.composer
        if not draft_tokens:
            composer.set_token_info("")
        elif not fit.fits:
            what = "too long for the context" if draft_tokens >= fit.n_ctx else "with it the chat no longer fits " \
                "the context"
            composer.set_token_info(f"{draft_tokens:,} tokens — {what} ({fit.n_ctx:,}); you will be asked what "
                                    "to do", warn=True)
        else:
            composer.set_token_info(f"{draft_tokens:,} tokens", warn=fit.warn)
