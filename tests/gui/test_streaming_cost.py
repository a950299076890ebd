"""What a streaming flush costs the GUI thread: only the reply being written is measured and laid out again,
and a reply drawn in pieces while it streams ends up rendered exactly like the whole text."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from hisho.gui.chat import markdown
from hisho.gui.chat.chat_view import ChatView, StreamText
from hisho.gui.chat.message_widget import MessageWidget
from hisho.gui.shell import theme

REPLY = ("## Ember's kitchen\n\nOnce upon a time a dragon wanted to cook. She had no pans.\n\n"
         "- eggs\n- flour\n\n```python\nprint('hot')\n\nprint('hotter')\n```\n\n"
         "She burned the bread every morning, and then she learned.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")


@pytest.mark.parametrize(("text", "cut"), [
    ("", 0),
    ("one paragraph still growing", 0),
    ("done.\n\nnext one", len("done.\n\n")),
    ("a\n\n```py\nx = 1\n\ny = 2", len("a\n\n")),              # a blank line inside an open fence is not a cut
    ("a\n\n```py\nx = 1\n\n```\n\ntail", len("a\n\n```py\nx = 1\n\n```\n\n")),
    ("text\n\n", len("text\n\n")),
])
def test_stable_prefix_ends_at_the_last_blank_line_outside_code(text: str, cut: int) -> None:
    assert markdown.stable_prefix(text) == cut


def test_streamed_reply_renders_like_the_whole_text(qtbot: QtBot) -> None:
    theme.apply(QApplication.instance(), theme.LIGHT)  # type: ignore[arg-type]
    streamed = MessageWidget(None, role="assistant", streaming=True)
    qtbot.addWidget(streamed)
    for i in range(0, len(REPLY), 7):
        streamed.append(REPLY[i:i + 7])
    whole = [s.html for s in markdown.render(REPLY, theme.current())]
    # While streaming, finished blocks and the growing one are drawn apart; the text is all there.
    shown = "".join(w.text() if isinstance(w, QLabel) else w.body.text()  # type: ignore[attr-defined]
                    for w in streamed._segments)
    for word in ("Ember", "eggs", "hotter", "learned", "<table"):
        assert word in shown
    # Segments replaced while streaming leave the screen at once (not when the event loop gets to deleting them).
    on_screen = "".join(lab.text() for lab in streamed.findChildren(QLabel) if lab.isVisibleTo(streamed))
    assert on_screen.count("eggs") == 1 and on_screen.count("hotter") == 1
    assert "<p>``</p>" not in on_screen  # the half-typed fence, drawn as text until the code block replaced it
    final = MessageWidget(None, role="assistant")
    qtbot.addWidget(final)
    final.set_text(streamed.text)
    assert [w.text() if isinstance(w, QLabel) else w.body.text()  # type: ignore[attr-defined]
            for w in final._segments] == whole


def test_a_flush_measures_only_the_streaming_reply(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    for _ in range(20):  # a conversation on screen: every earlier reply is a stack of rich-text labels
        w = MessageWidget(None, role="assistant")
        w.set_text(REPLY)
        view.rows.insertWidget(view.rows.count() - 1, w)
    buffer = StreamText()
    view.begin_stream(1, buffer)
    buffer.append("The reply starts. ")
    view._flush()
    for _ in range(3):  # everything laid out once at the window's width
        QApplication.processEvents()
    measured: list[Any] = []
    original = QLabel.heightForWidth

    def counting(self: QLabel, width: int) -> int:
        measured.append(self)
        return original(self, width)

    monkeypatch.setattr(QLabel, "heightForWidth", counting)
    for _ in range(10):
        buffer.append("more words arrive, ")
        view._flush()
        QApplication.processEvents()
    assert view.flushes == 11
    stream_labels = set(view.stream_widget.findChildren(QLabel)) if view.stream_widget else set()
    # Labels whose text did not change answer from their cache: only the streaming reply's are laid out again.
    assert measured and all(lab in stream_labels for lab in measured)
    view.detach_stream()
