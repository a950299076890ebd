"""A toast never covers the last message's actions: while one shows over the chat, the chat keeps room for it
at its end, so the last reply's Copy / Regenerate / Delete row stays above it (a long chat followed to its end,
and a short one), at 1280 and at 700 px, with a one-line toast and a long wrapped one."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import settle, wait_for

LONG = ("Restored 2,730 tokens from disk in 0.1 s · saved ~55 s. " * 4).strip()


def in_window(w: MainWindow, widget: QWidget) -> QRect:
    return QRect(widget.mapTo(w, QPoint(0, 0)), widget.size())


def chat_with(w: MainWindow, qtbot: QtBot, pairs: int) -> int:
    conv = w.ctx.store.create(f"{pairs} pairs")
    parent = None
    for i in range(pairs):
        user = w.ctx.store.add_message(conv.id, "user", f"question {i}\n\n" + "words " * 40, parent_id=parent)
        reply = w.ctx.store.add_message(conv.id, "assistant", f"answer {i}\n\n" + "text " * 60, parent_id=user.id)
        parent = reply.id
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    last = parent
    wait_for(qtbot, lambda: last in w.view.widgets and w.view.widgets[last].isVisible())
    return int(last or 0)


def assert_actions_clear(qtbot: QtBot, w: MainWindow, last: int, text: str) -> None:
    w.controller.toast(text, ms=60_000)
    row = w.view.widgets[last].buttons

    def clear() -> bool:   # the chat makes its room after the toast has laid itself out: wait, never a fixed pause
        toast = in_window(w, w.toast)
        return w.toast.isVisible() and all(
            not in_window(w, row[n]).intersects(toast) and in_window(w, w.view.viewport()).contains(
                in_window(w, row[n])) for n in ("copy", "regenerate", "delete"))

    qtbot.waitUntil(clear, timeout=10_000)
    toast = in_window(w, w.toast)
    for name in ("copy", "regenerate", "delete"):
        button = in_window(w, row[name])
        assert not button.intersects(toast), (name, button, toast)
        assert in_window(w, w.view.viewport()).contains(button), (name, "scrolled out of sight")
    w.toast.dismiss()
    settle(qtbot, 0.2)


def test_a_toast_leaves_the_last_replys_actions_uncovered(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    for width, height in ((1280, 720), (700, 600)):
        w.resize(width, height)
        settle(qtbot, 0.2)
        for pairs in (1, 8):
            last = chat_with(w, qtbot, pairs)
            settle(qtbot, 0.3)
            assert_actions_clear(qtbot, w, last, "Chat deleted.")
            assert_actions_clear(qtbot, w, last, LONG)
    # The message box shrinks under a toast (a document chip goes): the toast follows it, still clear.
    w.composer.set_attachments([(1, "notes.md", "notes.md · 40 tokens")])
    settle(qtbot, 0.2)
    w.controller.toast(LONG, ms=60_000)
    settle(qtbot, 0.2)
    w.composer.set_attachments([])
    qtbot.waitUntil(lambda: in_window(w, w.toast).bottom() < in_window(w, w.composer).top(), timeout=10_000)
    toast = in_window(w, w.toast)
    assert toast.bottom() < in_window(w, w.composer).top()
    for name in ("copy", "regenerate", "delete"):
        assert not in_window(w, w.view.widgets[last].buttons[name]).intersects(toast), name
    w.toast.dismiss()
    settle(qtbot, 0.2)
    # Gone again: the chat gives the room back (its end sits where it did).
    bar = w.view.verticalScrollBar()
    before = bar.maximum()
    w.controller.toast(LONG, ms=60_000)
    qtbot.waitUntil(lambda: bar.maximum() > before, timeout=10_000)
    w.toast.dismiss()
    qtbot.waitUntil(lambda: bar.maximum() == before, timeout=10_000)
