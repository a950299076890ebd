"""A reasoning model's thinking, folded above its answer: "Thinking… 8 s" while it streams, then
"Thought for 12 s", closed; a click opens it.

Rules of use: ``ThinkingBlock.show_thinking`` takes the whole reasoning so far (the view polls the turn, as it
does for the answer) and is cheap when nothing changed; the block never holds the answer's text.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QVBoxLayout

# A very long thought is stored whole; drawing all of it in one label would stall the window.
_SHOWN = 40_000


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


class ThinkingBlock(QFrame):
    """The fold: a header button that opens and closes it, and the reasoning as plain, muted text."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("ThinkingBlock")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)  # the stylesheet's left rule
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 4, 10, 6)
        lay.setSpacing(4)
        self.header = QPushButton()
        self.header.setObjectName("ThinkingHeader")
        self.header.setCheckable(True)
        self.header.setCursor(Qt.CursorShape.PointingHandCursor)
        self.header.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.header.toggled.connect(self._opened)
        self.body = QLabel()
        self.body.setObjectName("ThinkingText")
        self.body.setTextFormat(Qt.TextFormat.PlainText)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.header, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.body)
        self.text = ""
        self.thinking = False
        self.seconds: float | None = None
        self.unfinished = False
        self._opened(False)

    def show_thinking(self, text: str, seconds: float | None, *, thinking: bool, unfinished: bool = False) -> None:
        """The reasoning so far; ``thinking``: still going (the block stays open while it streams, and closes
        once the answer begins); ``unfinished``: the reply ended before an answer."""
        if text != self.text:
            self.text = text
            shown = text if len(text) <= _SHOWN else text[:_SHOWN] + f"\n… ({len(text) - _SHOWN:,} more characters)"
            self.body.setText(shown)
        was = self.thinking
        self.thinking, self.seconds, self.unfinished = thinking, seconds, unfinished
        if thinking and not was:
            self.header.setChecked(True)
        elif was and not thinking:
            self.header.setChecked(False)
        self._title()

    def _title(self) -> None:
        took = _duration(self.seconds)
        if self.thinking:
            words = f"Thinking… {took}".rstrip()
        elif self.unfinished:
            words = f"Still thinking when the reply stopped{' after ' + took if took else ''}"
        else:
            words = f"Thought for {took}" if took else "Thoughts"
        self.header.setText(("▾ " if self.header.isChecked() else "▸ ") + words)
        self.header.setToolTip("Hide the model's reasoning" if self.header.isChecked()
                               else "Show the model's reasoning (not part of its answer)")

    def _opened(self, on: bool) -> None:
        self.body.setVisible(on)
        self._title()

    @property
    def is_open(self) -> bool:
        return self.header.isChecked()

    def title(self) -> str:
        return self.header.text()
