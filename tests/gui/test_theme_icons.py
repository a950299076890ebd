"""Icons drawn in code follow the theme: the paperclip on the message box, on a document chip and on a sent
message's attachment are drawn in the theme's text colour when they are made and again when the theme changes
(a chip made in the dark theme was drawn in the light theme's ink: invisible on the dark chip)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QLabel, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from hisho.gui.chat.doc_sources import attachment_row
from hisho.gui.shell import theme
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import settle


def ink(image: QImage) -> QColor:
    """The colour of the icon's most opaque pixel."""
    best, colour = -1, QColor()
    for y in range(image.height()):
        for x in range(image.width()):
            c = image.pixelColor(x, y)
            if c.alpha() > best:
                best, colour = c.alpha(), c
    assert best > 128, "nothing drawn"
    return colour


def label_ink(label: QLabel) -> QColor:
    return ink(label.pixmap().toImage())


def button_ink(button: QPushButton) -> QColor:
    return ink(button.icon().pixmap(16, 16).toImage())


def close_to(c: QColor, hex_colour: str) -> bool:
    want = QColor(hex_colour)
    return max(abs(c.red() - want.red()), abs(c.green() - want.green()), abs(c.blue() - want.blue())) < 40


def icons_in(widget: QWidget) -> list[QLabel]:
    return [lab for lab in widget.findChildren(QLabel) if not lab.pixmap().isNull()]


def chip_icons(w: MainWindow) -> list[QLabel]:
    return icons_in(w.composer.chips)


def test_paperclips_are_drawn_for_the_theme_at_creation_and_after_a_change(qtbot: QtBot,
                                                                          window: MainWindow) -> None:
    w = window
    w.controller.set_theme("light")
    try:
        w.controller.set_theme("dark")
        settle(qtbot)
        w.composer.set_attachments([(1, "report.pdf", "report.pdf · 900 tokens")])   # made in the dark theme
        sent = attachment_row(["report.pdf"])
        qtbot.addWidget(sent)
        settle(qtbot)
        icons = chip_icons(w)
        assert len(icons) == 1
        assert close_to(label_ink(icons[0]), theme.DARK.text), label_ink(icons[0]).name()
        assert close_to(label_ink(icons_in(sent)[0]), theme.DARK.text)
        assert close_to(button_ink(w.composer.attach_button), theme.DARK.text)

        w.controller.set_theme("light")                    # and they follow a change
        settle(qtbot)
        assert close_to(label_ink(chip_icons(w)[0]), theme.LIGHT.text), label_ink(chip_icons(w)[0]).name()
        assert close_to(label_ink(icons_in(sent)[0]), theme.LIGHT.text)
        assert close_to(button_ink(w.composer.attach_button), theme.LIGHT.text)
        w.composer.set_attachments([])
    finally:
        w.controller.set_theme("light")
