"""The summary's progress panel gives its time-left text the room that text needs before the stage text takes the
rest (it split its width 3:2 whatever the texts were, and cut "about 2 min 10 s left" with room to spare)."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from hisho.gui.chat.documents import ProgressPanel


def test_the_time_left_is_shown_whole_when_the_panel_has_room(qtbot: QtBot) -> None:
    panel = ProgressPanel()
    qtbot.addWidget(panel)
    panel.stage.setText("Summarizing: chunk 5 of 12 of gpl-3.0.txt")
    panel.eta.setText("about 2 min 10 s left")
    need = panel.eta.fontMetrics().horizontalAdvance(panel.eta.text())
    panel.resize(panel.sizeHint().width(), 30)   # what the texts, the bar and Cancel ask for
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.eta.contentsRect().width() >= need
    panel.resize(panel.sizeHint().width() - 120, 30)  # short of room: the stage gives way first
    qtbot.wait(10)
    assert panel.eta.contentsRect().width() >= need
    assert panel.stage.width() < panel.stage.sizeHint().width()
