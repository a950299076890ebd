"""Markdown rendering (code blocks, tables, escaping, copy button) and start-up faults (corrupt, too-new DB)."""

from __future__ import annotations

import sqlite3

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QAbstractSlider
from pytestqt.qtbot import QtBot

from hisho.core import paths
from hisho.core.conversations.store import COMPONENT, ConversationStore
from hisho.core.db import Database
from hisho.gui.chat import markdown
from hisho.gui.chat.message_widget import MessageWidget
from hisho.gui.shell import theme
from tests.gui.conftest import long_chat_view, make_window

REPLY = """# Title

Some **bold** text and `inline`.

```python
def f(x):
    return x * 2
```

| a | b |
|---|---|
| 1 | 2 |

<script>alert(1)</script>
"""


def test_markdown_segments_code_tables_and_escaping() -> None:
    segs = markdown.render(REPLY, theme.LIGHT)
    assert [s.kind for s in segs] == ["html", "code", "html"]
    code = segs[1]
    assert code.language == "python" and code.code == "def f(x):\n    return x * 2"
    assert "<span" in code.html and "style=" in code.html  # highlighted with inline styles
    assert "<table" in segs[2].html and "<script>" not in segs[2].html and "&lt;script&gt;" in segs[2].html
    assert "<h1>Title</h1>" in segs[0].html
    assert markdown.render("```\nno language\n```", theme.DARK)[0].kind == "code"


def test_code_block_copy_button_copies_the_code(qtbot: QtBot) -> None:
    from hisho.core.conversations.store import Message

    w = MessageWidget(Message(1, 1, None, "assistant", REPLY))
    qtbot.addWidget(w)
    w.show()
    blocks = w.code_blocks()
    assert len(blocks) == 1
    qtbot.mouseClick(blocks[0].copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "def f(x):\n    return x * 2"
    assert blocks[0].copy_button.text() == "Copied"


def test_streaming_updates_reuse_segment_widgets(qtbot: QtBot) -> None:
    w = MessageWidget(None, streaming=True)
    qtbot.addWidget(w)
    w.append("Hello")
    first = w._segments[0]
    for piece in [" world", ", more", " text"]:
        w.append(piece)
    assert w._segments[0] is first and w.text == "Hello world, more text"


def test_corrupt_database_starts_with_a_message_and_leaves_the_file(qtbot: QtBot, default_model_path: object) -> None:
    junk = b"not a database at all " * 500
    paths.database_path().write_bytes(junk)
    w = make_window(qtbot)
    try:
        assert w.banner.isVisible() and "cannot be used" in w.banner.text()
        assert "nothing is saved" in w.banner.text()
        assert paths.database_path().read_bytes() == junk
        conv = w.ctx.store.create("works in memory")
        assert conv.id == 1
    finally:
        w.close()


def test_newer_schema_is_refused_with_a_message(qtbot: QtBot, default_model_path: object) -> None:
    ConversationStore(Database()).close()
    conn = sqlite3.connect(paths.database_path())
    conn.execute("UPDATE hisho_schema SET version = 42 WHERE component = ?", [COMPONENT])
    conn.commit()
    conn.close()
    w = make_window(qtbot)
    try:
        assert w.banner.isVisible() and "newer Hisho" in w.banner.text()
    finally:
        w.close()
    conn = sqlite3.connect(paths.database_path())
    assert conn.execute("SELECT version FROM hisho_schema WHERE component = ?", [COMPONENT]).fetchone() == (42,)


def test_read_only_view_of_a_locked_database(qtbot: QtBot, default_model_path: object) -> None:
    store = ConversationStore(Database())
    conv = store.create("kept")
    store.add_message(conv.id, "user", "still here")
    store.close()
    locker = sqlite3.connect(paths.database_path(), timeout=0)
    locker.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        from hisho.core.services import open_store

        s, problem = open_store()
        assert "locked" in problem and "read-only" in problem
        assert s.read_only and [m.content for m in s.branch(conv.id)] == ["still here"]
    finally:
        locker.rollback()
        locker.close()


def test_auto_scroll_follows_until_the_user_scrolls_up(qtbot: QtBot) -> None:
    from hisho.gui.chat.chat_view import StreamText

    view = long_chat_view(qtbot, 30)
    buffer = StreamText()
    view.begin_stream(7, buffer)
    bar = view.verticalScrollBar()
    buffer.append("Streaming line one.\n\n" * 5)
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=5000)
    assert view.append(99, "text from another turn") is False  # wrong turn id: dropped
    for _ in range(3):  # the user pages up to read (wheel, keys and drags all arrive as slider actions)
        bar.triggerAction(QAbstractSlider.SliderAction.SliderPageStepSub)
    held = bar.value()
    assert held < bar.maximum() - 40
    buffer.append("More streamed text.\n\n" * 20)
    qtbot.waitUntil(lambda: "More streamed" in (view.stream_widget.text if view.stream_widget else ""), timeout=5000)
    qtbot.wait(100)
    assert bar.value() == held and bar.maximum() > held
    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMaximum)  # back at the bottom: following again
    buffer.append("Last words.\n\n" * 20)
    qtbot.waitUntil(lambda: "Last words" in (view.stream_widget.text if view.stream_widget else ""), timeout=5000)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5000)
    view.detach_stream()


def test_a_user_bubble_shows_all_its_lines_at_every_width(qtbot: QtBot) -> None:
    """A long question wraps at the bubble's width: narrowing the window adds lines (the bubble is not cut after
    the lines it had when wide) and widening it again takes them away."""
    from hisho.core.conversations.store import Message
    from hisho.gui.chat.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    w = MessageWidget(Message(1, 1, None, "user", "Summarize report.pdf: a short overview paragraph, then bullet "
                              "points with the key facts, names, numbers and conclusions, each with its page."))
    view.rows.insertWidget(0, w)
    label = w.body.itemAt(0).widget()
    view.show()
    heights = []
    for width in (1200, 460, 1200):
        before = label.width()
        view.resize(width, 600)
        qtbot.waitUntil(lambda b=before: label.width() != b, timeout=5_000)    # the bubble took its new width
        qtbot.waitUntil(lambda: label.height() == label.heightForWidth(label.width()), timeout=5_000)
        heights.append(label.height())
    assert heights[1] > heights[0] == heights[2]
