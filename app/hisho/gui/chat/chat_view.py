"""The chat view: the messages of one conversation branch, streamed replies, find, and the empty state.

Rules of use:
- ``show_branch`` replaces the content. Only the newest ``PAGE`` messages get widgets at first; older ones are
  built a page at a time when the user scrolls near the top (a 1,000-message chat opens as fast as a short one).
- Streaming: ``begin_stream(turn_id, source)`` adds a reply widget that shows ``source.text`` (the one owner
  of the streamed text: the reply's ``Turn``), read by a timer at display rate (at most ~30 Hz, slower when
  rendering is expensive), never per token. Re-attaching to a reply after a chat switch shows its whole text
  once: the view keeps no copy of its own. ``append`` is matched on the turn id; ``end_stream``/``show_branch``
  detach the source, so late text from a cancelled or other turn is dropped, never drawn into the wrong chat.
- A message id has at most one widget: showing a message again replaces its widget (a reply saved while it
  streamed and then shown finished is one row, never a stale copy left in the layout).
- Messages waiting to be sent (``show_queued``) sit below the conversation with what they wait for and Cancel.
- Auto-scroll follows the reply while the user is at the bottom and stops as soon as they scroll up.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QScrollArea, QVBoxLayout, QWidget

from hisho.core.conversations.store import Message
from hisho.gui.chat.message_widget import MessageWidget

log = logging.getLogger("hisho.gui")


def _drop(w: QWidget) -> None:
    """Off the screen at once (deleteLater alone leaves it drawn, and in the layout, until the event loop runs)."""
    w.hide()
    w.setParent(None)
    w.deleteLater()

PAGE = 40
COLUMN_WIDTH = 860
BOTTOM_MARGIN = 24   # below the last message when nothing floats over the end of the chat
MIN_FLUSH_MS, MAX_FLUSH_MS = 33, 250
RENDER_BUDGET = 0.015  # share of one core the GUI thread may use while a reply streams; keeps decode unaffected


class StreamSource(Protocol):
    """The streamed reply's text so far (``hisho.core.conversations.chat.Turn`` is one); written by the producer thread,
    only ever growing."""

    @property
    def text(self) -> str: ...


class StreamText:
    """A ``StreamSource`` for producers that are not a chat turn (the decode benchmark, tests)."""

    def __init__(self) -> None:
        self.text = ""

    def append(self, piece: str) -> None:
        self.text += piece  # one new str, swapped in whole: a reader on another thread sees old or new


class ChatView(QScrollArea):
    action = Signal(str, int)      # (action name, message id) from a message's buttons
    cancel_queued = Signal(int)    # a waiting message's Cancel (its queue key)
    inserted = Signal(object)      # a MessageWidget for a saved message was put on screen (extras are added)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ChatScroll")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        host = QWidget()
        host.setObjectName("ChatColumnHost")
        hl = self._host_layout = QHBoxLayout(host)
        hl.setContentsMargins(24, 16, 24, BOTTOM_MARGIN)
        self.column = QWidget()
        self.column.setMaximumWidth(COLUMN_WIDTH)
        self.rows = QVBoxLayout(self.column)
        self.rows.setContentsMargins(0, 0, 0, 0)
        self.rows.setSpacing(6)
        self.rows.addStretch(1)
        hl.addStretch(1)
        hl.addWidget(self.column, 100)
        hl.addStretch(1)
        self.setWidget(host)
        self.conversation_id: int | None = None
        self.messages: list[Message] = []
        self.siblings: dict[int, list[int]] = {}
        self.widgets: dict[int, MessageWidget] = {}
        self.first_built = 0             # index into messages of the oldest built widget
        self.stream_widget: MessageWidget | None = None
        self.stream_turn: int | None = None
        self._source: StreamSource | None = None
        self.queued: dict[int, MessageWidget] = {}   # waiting messages by queue key, below the conversation
        self._stick = True
        self.render_s = 0.0              # time spent rendering the stream (figures and tests read it)
        self.flushes = 0
        self._cpu_mark = 0.0                 # GUI-thread CPU time at the last flush (paces the next one)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._flush)
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.actionTriggered.connect(self._user_scrolled)
        bar.rangeChanged.connect(self._range_changed)
        self.jump = QPushButton("↓  Latest", self)
        self.jump.setObjectName("JumpButton")
        self.jump.setToolTip("Scroll to the newest text and follow the reply again")
        self.jump.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump.clicked.connect(self.jump_to_latest)
        self.jump.hide()
        self.viewport().installEventFilter(self)

    # ----- content ---------------------------------------------------------------------------------------

    def highlight(self, mid: int | None, on: bool) -> bool:
        """Mark the message being edited (or unmark it); False when it is not on screen."""
        widget = self.widgets.get(mid) if mid is not None else None
        if widget is not None:
            widget.highlight(on)
        return widget is not None

    def clear(self) -> None:
        self.detach_stream()
        self.show_queued([])
        for w in self.widgets.values():
            _drop(w)
        self.widgets.clear()
        self.messages, self.siblings, self.first_built = [], {}, 0

    def show_branch(self, conversation_id: int | None, messages: list[Message],
                    siblings: dict[int, list[int]]) -> float:
        """Show a branch; returns the seconds it took (figures)."""
        start = time.perf_counter()
        self.setUpdatesEnabled(False)
        try:
            self.clear()
            self.conversation_id = conversation_id
            self.messages, self.siblings = list(messages), siblings
            self.first_built = max(0, len(messages) - PAGE)
            for m in messages[self.first_built:]:
                self._insert(m, self.rows.count())
        finally:
            self.setUpdatesEnabled(True)
        self._stick = True
        self.scroll_to_bottom()
        return time.perf_counter() - start

    def _insert(self, m: Message, index: int) -> MessageWidget:
        old = self.widgets.pop(m.id, None)
        if old is not None:  # one widget per message: the newer one replaces it where it was
            index = self.rows.indexOf(old)
            _drop(old)
        w = MessageWidget(m, siblings=self.siblings.get(m.id))
        w.action.connect(self.action)
        self.widgets[m.id] = w
        self.rows.insertWidget(index, w)
        self.inserted.emit(w)
        return w

    def _end_of_conversation(self) -> int:
        """Layout index after the last message (the stream and the waiting messages come after it)."""
        index = self.rows.count()
        for w in (self.stream_widget, *self.queued.values()):
            if w is not None and self.rows.indexOf(w) >= 0:
                index = min(index, self.rows.indexOf(w))
        return index

    def show_queued(self, items: list[tuple[int, str, str]]) -> None:
        """Messages waiting to be sent, as (key, text, what they wait for), below everything else."""
        keep = {key for key, _t, _w in items}
        for key in [k for k in self.queued if k not in keep]:
            _drop(self.queued.pop(key))
        added = False
        for key, text, _waiting in items:
            w = self.queued.get(key)
            if w is None:
                w = self.queued[key] = MessageWidget(None, role="user", queued=True)
                w.set_text(text)
                w.action.connect(lambda name, _mid, k=key: self.cancel_queued.emit(k) if name == "cancel" else None)
                self.rows.addWidget(w)
                added = True
        if added:
            # Just sent: show it and what it waits for even if the user had scrolled up to read (else
            # a message queued while scrolled up landed out of sight, as if the send had done nothing).
            self._stick = True
            self.jump.hide()
        for key, _text, waiting in items:
            self.queued[key].set_waiting(waiting)
        if items:
            self.scroll_to_bottom()

    def load_older(self) -> int:
        """Build the next page of older messages above the current ones; returns how many."""
        if self.first_built == 0:
            return 0
        bar = self.verticalScrollBar()
        from_bottom = bar.maximum() - bar.value()
        new_first = max(0, self.first_built - PAGE)
        self.setUpdatesEnabled(False)
        for i, m in enumerate(self.messages[new_first:self.first_built]):
            self._insert(m, 1 + i)  # after the top stretch
        count = self.first_built - new_first
        self.first_built = new_first
        self.setUpdatesEnabled(True)
        self.column.adjustSize()
        bar.setValue(bar.maximum() - from_bottom)  # keep what the user was reading in place
        return count

    def built_count(self) -> int:
        return len(self.widgets)

    # ----- streaming -------------------------------------------------------------------------------------

    def begin_stream(self, turn_id: int, source: StreamSource) -> MessageWidget:
        self.detach_stream()
        self.stream_turn = turn_id
        self._source = source
        self.stream_widget = MessageWidget(None, role="assistant", streaming=True)
        self.rows.insertWidget(self._end_of_conversation(), self.stream_widget)
        self._stick = True
        self.render_s, self.flushes = 0.0, 0
        self._cpu_mark = time.thread_time()
        self._timer.start(MIN_FLUSH_MS)
        return self.stream_widget

    def append(self, turn_id: int, text: str) -> bool:
        """Add streamed text if it belongs to the reply on screen; False (and dropped) otherwise."""
        if turn_id != self.stream_turn or self.stream_widget is None or not text:
            return False
        self.render_s += self.stream_widget.append(text)
        self.flushes += 1
        if self._stick:
            self.scroll_to_bottom()
        return True

    def _flush(self) -> None:
        source, widget = self._source, self.stream_widget
        if source is None or widget is None or self.stream_turn is None:
            return
        # What the GUI thread used since the last flush: that flush's render AND the layout and paint Qt did
        # after it (the larger part: ~2.5 ms of 3 ms for a growing reply), plus anything else on this thread.
        cpu = time.thread_time()
        spent_ms = (cpu - self._cpu_mark) * 1000
        self._flush_thinking(source, widget)
        text = source.text
        if not text.startswith(widget.text):  # a tool round took the text before its calls: what follows now
            self.render_s += widget.set_text(text)
        elif len(text) > len(widget.text):
            self.append(self.stream_turn, text[len(widget.text):])
        self._cpu_mark = cpu
        # Pace the next flush so the GUI thread stays under RENDER_BUDGET of one core (2-core laptops share the
        # CPU with decode; a preempted decode thread stalls the others at the next barrier): a 3 ms flush
        # allows ~10 Hz, a 1 ms one the full 30 Hz.
        interval = min(MAX_FLUSH_MS, max(MIN_FLUSH_MS, int(spent_ms / RENDER_BUDGET)))
        self._timer.start(interval)

    @staticmethod
    def _flush_thinking(source: StreamSource, widget: MessageWidget) -> None:
        """A reasoning model's thinking so far, folded above the answer (a chat turn has ``reasoning``)."""
        thought = str(getattr(source, "reasoning", "") or "")
        if not thought:
            return
        began = getattr(source, "first_token_at", None)
        answered = getattr(source, "answer_at", None)
        end = answered if answered is not None else time.monotonic()
        widget.show_thinking(thought, end - began if began is not None else None, thinking=answered is None)

    def detach_stream(self) -> None:
        """Stop drawing the current stream (its remaining text goes nowhere)."""
        self._timer.stop()
        self._source = None
        self.stream_turn = None
        if self.stream_widget is not None:
            _drop(self.stream_widget)
            self.stream_widget = None
        self.jump.hide()

    def end_stream(self, turn_id: int, final: Message, siblings: list[int]) -> None:
        """Replace the streaming widget by the saved message."""
        if turn_id != self.stream_turn:
            return
        index = self._end_of_conversation()
        self.detach_stream()
        self.messages = [m for m in self.messages if m.id != final.id] + [final]
        self.siblings[final.id] = siblings
        self._insert(final, index)
        if self._stick:
            self.scroll_to_bottom()

    # ----- scrolling and find --------------------------------------------------------------------------------

    def reserve_bottom(self, px: int) -> None:
        """Keep ``px`` at the end of the chat clear (a toast floats there): the last message and its Copy /
        Delete row stay above it, at the bottom as before when the view follows the end."""
        self._host_layout.setContentsMargins(24, 16, 24, max(BOTTOM_MARGIN, px))
        if self._stick:
            self.scroll_to_bottom()

    def scroll_to_bottom(self) -> None:
        """After the layout settles, go to the bottom, unless the user has scrolled away in the meantime."""
        QTimer.singleShot(0, self._to_bottom_if_following)

    def _to_bottom_if_following(self) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def jump_to_latest(self) -> None:
        self._stick = True
        self.jump.hide()
        self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())

    def _place_jump(self) -> None:
        self.jump.adjustSize()
        vp = self.viewport().geometry()
        self.jump.move(vp.center().x() - self.jump.width() // 2, vp.bottom() - self.jump.height() - 12)
        self.jump.raise_()

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt naming
        if obj is self.viewport() and event.type() == QEvent.Type.Resize and self.jump.isVisible():
            self._place_jump()
        return super().eventFilter(obj, event)

    def _user_scrolled(self, _action: int) -> None:
        # Only the user's scrolling (wheel, keys, drag, scrollbar clicks all arrive as slider actions) decides
        # whether we follow the reply; layout changes move the value too, and must not. sliderPosition() is
        # already the new position when the action is reported.
        bar = self.verticalScrollBar()
        self._stick = bar.sliderPosition() >= bar.maximum() - 40
        if self._stick:
            self.jump.hide()
        elif self.stream_widget is not None:  # scrolled up while a reply streams: one click back to it
            self._place_jump()
            self.jump.show()

    def _scrolled(self, value: int) -> None:
        if value <= 80 and self.first_built > 0:
            QTimer.singleShot(0, self.load_older)

    def _range_changed(self, _min: int, maximum: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(maximum)

    def find(self, text: str, after: int | None = None,  # type: ignore[override]
             backwards: bool = False) -> int | None:
        # (QWidget.find(id) is a static lookup by window id nobody here calls; this one finds message text.)
        """Scroll to the next (or previous) message after message id ``after`` containing ``text``; returns its
        id."""
        needle = text.lower().strip()
        if not needle:
            return None
        msgs = self.messages[::-1] if backwards else self.messages
        start = 0
        if after is not None:
            ids = [m.id for m in msgs]
            start = ids.index(after) + 1 if after in ids else 0
        order = msgs[start:] + msgs[:start]
        hit = next((m for m in order if needle in m.content.lower()), None)
        for w in self.widgets.values():
            w.highlight(False)
        if hit is None:
            return None
        while hit.id not in self.widgets and self.load_older():
            pass
        w = self.widgets[hit.id]
        w.highlight(True)
        self._stick = False
        QTimer.singleShot(0, lambda: self.ensureWidgetVisible(w, 0, 80))
        return hit.id

    def matches(self, text: str) -> list[int]:
        """Ids of the messages containing ``text``, oldest first (Find's "k of n")."""
        needle = text.lower().strip()
        return [m.id for m in self.messages if needle and needle in m.content.lower()]
