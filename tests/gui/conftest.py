"""GUI fixtures: the real window, offscreen, on the real bundled model, in the test's own HISHO_HOME.

Every GUI test fails on Qt warnings (qutebrowser's ``qt_log_level_fail``), except the offscreen platform's
notice that it cannot resize native windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.gui.chat.chat_view import ChatView
from hisho.gui.shell.app import open_window
from hisho.gui.shell.main_window import MainWindow

QT_NOISE = [r"This plugin does not support propagateSizeHints\(\)", r"QFont::setPointSizeF"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gui" in str(item.fspath):
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            item.add_marker(pytest.mark.qt_log_ignore(*QT_NOISE))


def make_window(qtbot: QtBot) -> MainWindow:
    window = open_window(None)
    qtbot.addWidget(window)
    window.show()
    # Generous: on a loaded machine (CI beside other work) starting the engine and loading the model took
    # 136–190 s; the tests assert behaviour, not load speed.
    qtbot.waitUntil(lambda: window.controller.model_ready, timeout=300_000)
    return window


@pytest.fixture
def window(qtbot: QtBot, default_model_path: Path) -> Iterator[MainWindow]:
    w = make_window(qtbot)
    yield w
    w.close()


def wait_idle(qtbot: QtBot, w: MainWindow, timeout: int = 300_000) -> None:
    """Until no reply streams and both worker lanes are empty."""
    qtbot.waitUntil(lambda: w.controller.active is None and not w.ctx.executor.busy("engine")
                    and not w.ctx.executor.busy("store"), timeout=timeout)
    qtbot.wait(30)


def wait_for(qtbot: QtBot, cond: Callable[[], bool], timeout: int = 90_000) -> None:
    qtbot.waitUntil(cond, timeout=timeout)


def message_ids(w: MainWindow, cid: int) -> set[int]:
    return {m.id for m in w.ctx.store.branch(cid)}


def wait_reply(qtbot: QtBot, w: MainWindow, cid: int, known: set[int], timeout: int = 300_000) -> None:
    """Until chat ``cid`` ends in a finished reply that is none of ``known`` (its message ids before the send),
    then until idle. A lasting state, unlike ``controller.active``: on a fast machine a short reply begins and
    ends between two looks, and a wait for it to be seen streaming would never end."""
    from hisho.core.conversations.store import STREAMING

    def answered() -> bool:
        branch = w.ctx.store.branch(cid)
        return bool(branch) and branch[-1].role == "assistant" and branch[-1].id not in known \
            and branch[-1].status != STREAMING

    wait_for(qtbot, answered, timeout)
    wait_idle(qtbot, w)


def settle(qtbot: QtBot, seconds: float = 0.2) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        qtbot.wait(20)


def long_chat_view(qtbot: QtBot, n: int) -> ChatView:
    """A chat view on screen (700x500) showing ``n`` long messages, alternately the user's and the assistant's."""
    from hisho.core.conversations.store import Message

    view = ChatView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    msgs = [Message(i + 1, 1, i or None, "user" if i % 2 == 0 else "assistant", f"message {i}\n\n" + "text " * 80)
            for i in range(n)]
    view.show_branch(1, msgs, {})
    return view
