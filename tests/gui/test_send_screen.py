"""A send runs against any screen with ``SendScreen``'s methods and any presenter with ``SendHost``'s: here plain
objects, no window and no model. What it shows while a message waits, and what Stop and Cancel give back."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from hisho.core.appstate import AppState
from hisho.core.conversations.chat import FitReport, TurnResult
from hisho.core.conversations.store import Conversation, Message
from hisho.core.engine.protocol import Progress
from hisho.gui.chat.sending import Sending


class Screen:
    """Records what a send shows; holds the message box's text."""

    def __init__(self, parent: QWidget) -> None:
        self.parent = parent
        self.queued: list[tuple[int, str, str]] = []
        self.box = ""
        self.editing: int | None = None
        self.sending = False
        self.status = ""
        self.summary: str | None = None

    def window(self) -> QWidget:
        return self.parent

    def show_branch(self, conversation_id: int, branch: list[Message], siblings: dict[int, list[int]]) -> None:
        pass

    def mark_listed(self, conversation_id: int) -> None:
        pass

    def show_queued(self, items: list[tuple[int, str, str]]) -> None:
        self.queued = list(items)

    def show_stream(self, turn: Any) -> None:
        pass

    def stream_waiting(self, turn_id: int, text: str) -> None:
        pass

    def end_stream(self, turn_id: int, message: Message) -> None:
        pass

    def detach_stream(self) -> None:
        pass

    def reply_saved(self, result: TurnResult) -> None:
        pass

    def set_sending(self, on: bool) -> None:
        self.sending = on

    def editing_id(self) -> int | None:
        return self.editing

    def end_edit(self) -> None:
        self.editing = None

    def draft(self) -> str:
        return self.box

    def set_draft(self, text: str) -> None:
        self.box = text

    def clear_draft(self) -> None:
        self.box = ""

    def attachment_count(self) -> int:
        return 0

    def images_waiting(self) -> bool:
        return False

    def take_images(self) -> list[str]:
        return []

    def put_images(self, names: list[str]) -> None:
        pass

    def show_status(self, text: str) -> None:
        self.status = text

    def clear_status(self, prefix: str = "") -> None:
        if self.status.startswith(prefix):
            self.status = ""

    def show_reply_figures(self, speed: float | None, ttft: float | None, live: bool = False,
                           answer: float | None = None) -> None:
        pass

    def summary_running(self) -> str | None:
        return self.summary


class Host:
    """The presenter's side: one chat on screen; engine jobs are kept, to be run by the test."""

    def __init__(self) -> None:
        self.current: Conversation | None = Conversation(id=7, title="A chat")
        self.model_ready = True
        self.model_failed = False
        self.held: list[tuple[int, str]] = []
        engine = SimpleNamespace(progress=lambda: None, cancel=lambda _id: None)
        kv = SimpleNamespace(hold_draft=lambda cid, text: self.held.append((cid, text)))
        self.ctx = SimpleNamespace(engine=engine, kv=kv, executor=SimpleNamespace(post=lambda fn: fn()),
                                   state=AppState())   # no remote engine being connected
        self.service = SimpleNamespace()
        self.store = SimpleNamespace()
        self.jobs: list[tuple[Callable[[], Any], Callable[[Any], Any] | None]] = []
        self.toasts: list[str] = []

    def toast(self, text: str, undo: Callable[[], None] | None = None, label: str = "Undo", ms: int = 0) -> None:
        self.toasts.append(text)

    def report(self, exc: BaseException) -> None:
        raise AssertionError(f"unexpected error: {exc!r}")

    def store_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None) -> None:
        raise AssertionError("no store work expected")

    def engine_job(self, fn: Callable[[], Any], done: Callable[[Any], Any] | None = None,
                   failed: Callable[[BaseException], Any] | None = None) -> None:
        self.jobs.append((fn, done))

    def title_of(self, cid: int) -> str:
        return "Other chat"

    def refresh(self, select: int | None = None) -> None:
        pass

    def reload(self) -> None:
        pass

    def select(self, cid: int) -> None:
        pass


class Fit:
    def remember(self, cid: int, fit: FitReport) -> None:
        pass

    def show_live(self, cid: int) -> None:
        pass

    def update(self, draft: str | None = None) -> None:
        pass


def make(qtbot: QtBot) -> tuple[Sending, Screen, Host]:
    parent = QWidget()
    qtbot.addWidget(parent)
    screen, host = Screen(parent), Host()
    return Sending(host, screen, Fit(), lambda: None), screen, host  # type: ignore[arg-type]


def test_a_message_waits_for_the_model_and_cancel_gives_it_back(qtbot: QtBot) -> None:
    sending, screen, host = make(qtbot)
    host.model_ready = False
    screen.box = "Hello"
    sending.send("Hello")
    assert screen.box == ""                                  # taken out of the box at once
    assert [(t, s) for _k, t, s in screen.queued] == [("Hello", "Waiting for the model to load · sent when it "
                                                                "finishes")]
    assert host.jobs == []                                   # nothing sent while the model loads
    screen.box = "typed since"
    sending.cancel_queued(screen.queued[0][0])
    assert screen.box == "Hello\n\ntyped since"              # nothing lost
    assert screen.queued == [] and sending.queue == []


def test_a_summary_running_holds_the_message_and_says_so(qtbot: QtBot) -> None:
    sending, screen, host = make(qtbot)
    screen.summary = "report.pdf"
    sending.send("Next")
    assert screen.queued[0][2] == "Waiting for the summary of report.pdf · sent when it finishes"
    screen.summary = None
    sending.pump()
    assert len(host.jobs) == 1 and screen.queued[0][1:] == ("Next", "Sending…")


def test_stop_before_the_reply_began_gives_the_text_back_and_holds_it(qtbot: QtBot) -> None:
    sending, screen, host = make(qtbot)
    sending.send("Long question")
    assert len(host.jobs) == 1                                # one engine job for the send
    assert screen.sending and screen.queued[0][1:] == ("Long question", "Sending…")
    sending._show_reading(Progress(op="prefill", id=3, done=10, total=40))
    assert screen.queued[0][2] == "Reading your message · 25 %"
    sending.stop_here()
    assert not screen.sending and screen.queued[0][2] == "Stopping…"
    job, done = host.jobs.pop()
    assert done is not None
    done(job())                                               # the engine lane lets go: nothing was recorded
    assert screen.box == "Long question" and screen.queued == []
    assert host.held == [(7, "Long question")]               # type-ahead does not read it again
    assert sending.starting is None and not screen.sending


def test_text_typed_while_a_stopped_message_lets_go_is_held_with_it(qtbot: QtBot) -> None:
    sending, screen, host = make(qtbot)
    sending.send("Long question")
    sending.stop_here()
    assert host.held == [(7, "Long question")]               # held at the Stop: its type-ahead is dropped
    screen.box = "and one more thing"                         # typed before the engine lets go
    job, done = host.jobs.pop()
    assert done is not None
    done(job())
    assert screen.box == "Long question\n\nand one more thing"
    assert host.held == [(7, "Long question"), (7, "Long question\n\nand one more thing")]
