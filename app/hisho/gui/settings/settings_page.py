"""The header every Settings page starts with (its title, then what the page is for), in one style."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


def page_layout(page: QWidget, title: str, intro: str) -> QVBoxLayout:
    """``page``'s layout with the header already in it; the page adds its own rows below."""
    lay = QVBoxLayout(page)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(12)
    heading = QLabel(title)
    heading.setObjectName("DialogTitle")
    text = QLabel(intro)
    text.setObjectName("Meta")
    text.setWordWrap(True)
    lay.addWidget(heading)
    lay.addWidget(text)
    return lay
