"""What a send uses of the rest of the window: the screen (``SendScreen``) and the chat presenter (``SendHost``).

Rules of use:
- ``hisho.gui.chat.sending.Sending`` reads and changes the screen only through ``SendScreen``'s methods, one
  per thing a send shows or reads ("show the queued messages", "the reply is waiting for…", "the message box
  holds this text"), never through the window's widgets. ``ChatScreen`` is that screen made of the window's
  widgets (``SendWindow`` names them); a test can hand ``Sending`` any object with those methods.
- ``SendHost`` is what a send uses of the chat presenter (``ChatController``): the chat on screen, the model's
  state, the worker lanes, toasts and errors, the list. mypy checks at ``Sending(...)`` that the controller
  has each member.
- Everything here runs on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QWidget

from hisho.core.conversations import images as chat_images
from hisho.core.conversations.chat import ChatService, FitReport, Turn, TurnResult
from hisho.core.conversations.store import Conversation, ConversationStore, Message
from hisho.gui.shell.protocols import TOAST_MS, HasContext

if TYPE_CHECKING:
    from hisho.gui.chat.chat_view import ChatView
    from hisho.gui.chat.composer import Composer
    from hisho.gui.chat.sidebar import Sidebar

QueuedItem = tuple[int, str, str]  # (queue key, text, what it waits for), as the view lists it under the chat


class SendScreen(Protocol):
    """The screen as a send sees it."""

    def window(self) -> QWidget: ...  # the parent of the send's dialog and timers

    # the chat
    def show_branch(self, conversation_id: int, branch: list[Message], siblings: dict[int, list[int]]) -> None: ...
    def mark_listed(self, conversation_id: int) -> None: ...
    def show_queued(self, items: list[QueuedItem]) -> None: ...

    # the streaming reply
    def show_stream(self, turn: Turn) -> None: ...
    def stream_waiting(self, turn_id: int, text: str) -> None: ...
    def end_stream(self, turn_id: int, message: Message) -> None: ...
    def detach_stream(self) -> None: ...
    def reply_saved(self, result: TurnResult) -> None: ...

    # the message box
    def set_sending(self, on: bool) -> None: ...
    def editing_id(self) -> int | None: ...
    def end_edit(self) -> None: ...
    def draft(self) -> str: ...
    def set_draft(self, text: str) -> None: ...
    def clear_draft(self) -> None: ...
    def attachment_count(self) -> int: ...
    def images_waiting(self) -> bool: ...
    def put_images(self, names: list[str]) -> None: ...   # a message not sent: its pictures wait again
    def take_images(self) -> list[str]: ...   # the pictures waiting in the message box, which is then emptied of them

    # the status bar, and what else keeps the engine busy
    def show_status(self, text: str) -> None: ...
    def clear_status(self, prefix: str = "") -> None: ...
    def show_reply_figures(self, speed: float | None, ttft: float | None, live: bool = False,
                           answer: float | None = None) -> None: ...
    def summary_running(self) -> str | None: ...


class FitMemory(Protocol):
    """The context meter's figures per chat (``hisho.gui.chat.context_fit.ContextFit``)."""

    def remember(self, cid: int, fit: FitReport) -> None: ...
    def show_live(self, cid: int) -> None: ...
    def update(self, draft: str | None = None) -> None: ...


class PresenterBase(Protocol):
    """What every chat part uses of the chat presenter (``hisho.gui.shell.controller.ChatController``): the chat
    on screen, the chat service, toasts, error reports and the store lane."""

    current: Conversation | None

    @property
    def service(self) -> ChatService: ...

    def toast(self, text: str, undo: Callable[[], None] | None = None, label: str = "Undo",
              ms: int = TOAST_MS) -> None: ...
    def report(self, exc: BaseException) -> None: ...
    def store_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None) -> None: ...


class SendHost(PresenterBase, HasContext, Protocol):
    """What a send uses of the chat presenter, beyond ``PresenterBase``."""

    @property
    def model_ready(self) -> bool: ...

    @property
    def model_failed(self) -> bool: ...

    @property
    def store(self) -> ConversationStore: ...

    def engine_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None,
                   failed: Callable[[BaseException], Any] | None = None) -> None: ...
    def title_of(self, cid: int) -> str: ...
    def refresh(self, select: int | None = None) -> None: ...
    def reload(self) -> None: ...
    def select(self, cid: int) -> None: ...


class StatusLine(Protocol):
    """The window's status bar, as a send uses it: a passing message, and the reply's figures."""

    def showMessage(self, text: str, timeout: int = 0) -> None: ...  # noqa: N802 - Qt naming
    def currentMessage(self) -> str: ...  # noqa: N802 - Qt naming
    def clearMessage(self) -> None: ...  # noqa: N802 - Qt naming
    def set_reply_figures(self, tokens_per_s: float | None, ttft_s: float | None, live: bool = False,
                          answer_s: float | None = None) -> None: ...


class SendWindow(Protocol):
    """The window's widgets a ``ChatScreen`` is made of."""

    @property
    def view(self) -> ChatView: ...

    @property
    def composer(self) -> Composer: ...

    @property
    def status(self) -> StatusLine: ...

    @property
    def sidebar(self) -> Sidebar: ...

    @property
    def turn_finished(self) -> SignalInstance: ...

    def show_empty(self, empty: bool) -> None: ...

    def window(self) -> QWidget: ...


class ChatScreen:
    """``SendScreen`` on the main window's chat: its message view, message box, status bar and chat list."""

    def __init__(self, window: SendWindow) -> None:
        self._w = window
        self.view, self.composer, self.status = window.view, window.composer, window.status

    def window(self) -> QWidget:
        return self._w.window()

    def show_branch(self, conversation_id: int, branch: list[Message], siblings: dict[int, list[int]]) -> None:
        self._w.show_empty(False)
        self.view.show_branch(conversation_id, branch, siblings)

    def mark_listed(self, conversation_id: int) -> None:
        """The chat list marks this chat as the one on screen (before the list is refreshed)."""
        self._w.sidebar.current_id = conversation_id

    def show_queued(self, items: list[QueuedItem]) -> None:
        if items:
            self._w.show_empty(False)
        self.view.show_queued(items)

    def show_stream(self, turn: Turn) -> None:
        self.view.begin_stream(turn.id, turn)

    def stream_waiting(self, turn_id: int, text: str) -> None:
        """What the streaming reply waits for, on its widget, if that reply is the one on screen."""
        widget = self.view.stream_widget
        if widget is not None and self.view.stream_turn == turn_id:
            widget.set_waiting(text)

    def end_stream(self, turn_id: int, message: Message) -> None:
        self.view.end_stream(turn_id, message, [message.id])

    def detach_stream(self) -> None:
        self.view.detach_stream()

    def reply_saved(self, result: TurnResult) -> None:
        self._w.turn_finished.emit(result)

    def set_sending(self, on: bool) -> None:
        self.composer.set_generating(on)

    def editing_id(self) -> int | None:
        return self.composer.editing_id

    def end_edit(self) -> None:
        """Leave edit mode; what was typed before the edit comes back."""
        self.composer.end_edit(restore=True)

    def draft(self) -> str:
        return self.composer.text()

    def set_draft(self, text: str) -> None:
        """The message box holds ``text``, with the focus."""
        self.composer.set_text(text)
        self.composer.focus()

    def clear_draft(self) -> None:
        self.composer.clear()

    def attachment_count(self) -> int:
        return len(self.composer.attachment_names())

    def images_waiting(self) -> bool:
        return bool(self.composer.images.names())

    def put_images(self, names: list[str]) -> None:
        for name in names:
            self.composer.images.add(name, chat_images.path(name))

    def take_images(self) -> list[str]:
        names = self.composer.images.names()
        self.composer.images.clear()
        return names

    def show_status(self, text: str) -> None:
        self.status.showMessage(text)

    def clear_status(self, prefix: str = "") -> None:
        """Clear the status bar's message (only one that starts with ``prefix``)."""
        if self.status.currentMessage().startswith(prefix):
            self.status.clearMessage()

    def show_reply_figures(self, speed: float | None, ttft: float | None, live: bool = False,
                           answer: float | None = None) -> None:
        self.status.set_reply_figures(speed, ttft, live=live, answer_s=answer)

    def summary_running(self) -> str | None:
        """The name of what is being summarized (None when nothing is). The window's documents part is made
        after the chat's, so it may not be there yet."""
        documents = getattr(self._w, "documents", None)
        return str(documents.job_name) if documents is not None and documents.running else None
