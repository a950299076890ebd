"""What an hour of ordinary use under Xvfb + openbox found: Chat → Stop stopped
another chat's reply, a message queued while scrolled up landed out of sight, a stopped reply's marker broke
over two lines."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QImage, QPalette
from PySide6.QtWidgets import QAbstractSlider, QApplication, QMenu
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import STOPPED, Message
from hisho.gui.chat.message_widget import MessageWidget
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import long_chat_view, wait_for, wait_idle
from tests.gui.test_chat_window import STORY, open_chat, streaming_text
from tests.gui.test_window_use import LONG, SHORT, story_streaming


def chat_menu_stop(w: MainWindow) -> QAction:
    """Chat → Stop as the user finds it: the menu opened (its state is set then), the action by its text."""
    menu = next(a.menu() for a in w.menuBar().actions() if a.text() == "&Chat")
    menu.aboutToShow.emit()
    return next(a for a in menu.actions() if a.text() == "Stop")


def test_chat_menu_stop_acts_only_on_the_chat_on_screen(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    cid, other = story_streaming(qtbot, w, other_title="quiet")
    turn = w.controller.running
    assert turn is not None
    w.controller.select(other)
    wait_for(qtbot, lambda: w.view.conversation_id == other)
    stop = chat_menu_stop(w)
    assert not stop.isEnabled()  # nothing runs in this chat, like its message box (Send, not Stop)
    stop.trigger()               # even if it were reached: the reply in "story" is not this chat's
    w.escape()
    assert not turn.cancelled
    grown = len(turn.text) + 20
    wait_for(qtbot, lambda: len(turn.text) > grown or w.controller.running is None)
    assert not turn.cancelled
    if w.controller.running is turn:  # still writing (a fast machine may have finished it): Stop it from its chat
        w.controller.select(cid)
        wait_for(qtbot, lambda: w.view.conversation_id == cid)
        stop = chat_menu_stop(w)
        assert stop.isEnabled()
        stop.trigger()
        assert turn.cancelled
    wait_idle(qtbot, w)


def test_a_message_queued_while_scrolled_up_is_brought_into_view(qtbot: QtBot) -> None:
    view = long_chat_view(qtbot, 20)
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=5000)
    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMinimum)  # the user scrolls up to reread
    assert bar.value() == 0
    view.show_queued([(1, "And what is three plus three?", "Waiting for the summary of GPL-3 · sent when it "
                                                            "finishes")])
    waiting = view.queued[1]
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5000)
    assert view.viewport().rect().contains(waiting.geometry().translated(view.widget().pos()))
    assert not view.jump.isVisible()
    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMinimum)  # reading again while it waits
    view.show_queued([(1, "And what is three plus three?", "Sending…")])  # the same message moving on
    qtbot.wait(50)
    assert bar.value() == 0  # only a new message brings the view down, not its status changing


def test_a_stopped_replys_marker_stays_on_one_line(qtbot: QtBot) -> None:
    m = Message(2, 1, 1, "assistant", "As they sailed across the ocean, John met a captain.", status=STOPPED,
                tokens=471, tokens_per_s=41.7)
    w = MessageWidget(m)
    qtbot.addWidget(w)
    w.resize(900, 200)
    w.show()
    qtbot.waitExposed(w)
    marker = next(lab for lab in w.findChildren(type(w.meta)) if lab.text() == "Stopped · partial reply")
    # Under openbox at 1240 px it was 105 px wide for a 140 px text: the row squeezed it and it wrapped.
    assert marker.width() >= marker.fontMetrics().horizontalAdvance(marker.text()), marker.width()


def test_renaming_the_chat_on_screen_from_the_list_renames_it_everywhere(qtbot: QtBot,
                                                                        window: MainWindow) -> None:
    from hisho.gui.chat.sidebar import ID_ROLE, TITLE_ROLE

    w = window
    cid = open_chat(qtbot, w, SHORT, title="Name three colours of the rainbow.")
    w.ctx.store.add_message(cid, "user", "A dragon named Aethoria bakes bread.")
    w.controller.refresh(cid)
    qtbot.keyClicks(w.sidebar.search, "Aethoria")  # the user had searched, and opened the result

    def rows() -> dict[int, str]:
        items = [w.sidebar.list.item(i) for i in range(w.sidebar.list.count())]
        return {it.data(ID_ROLE): it.data(TITLE_ROLE) for it in items if it.data(ID_ROLE) is not None}

    wait_for(qtbot, lambda: rows() == {cid: "Name three colours of the rainbow."})
    w.sidebar.rename_requested.emit(cid, "Colours and stories")  # the list's Rename…, its dialog answered
    wait_for(qtbot, lambda: w.ctx.store.get(cid).title == "Colours and stories")
    wait_for(qtbot, lambda: rows() == {cid: "Colours and stories"})
    assert w.title.text() == "Colours and stories"  # the header
    current = w.controller.current
    assert current is not None and current.title == "Colours and stories"  # what Chat settings names it by
    w.sidebar.search.clear()
    wait_for(qtbot, lambda: rows().get(cid) == "Colours and stories")


def test_the_header_follows_a_title_changed_elsewhere(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    cid = open_chat(qtbot, w, SHORT, title="Write a very long story about a robot gardener")
    assert w.title.text() == "Write a very long story about a robot gardener"
    # What editing the first message does to the title (the service renames the chat): the list refreshes
    w.ctx.store.update(cid, title="Tell me a short poem about robot gardeners.")
    w.controller.refresh()
    wait_for(qtbot, lambda: w.title.text() == "Tell me a short poem about robot gardeners.")
    current = w.controller.current
    assert current is not None and current.title == "Tell me a short poem about robot gardeners."


def test_the_token_count_of_a_sent_edit_leaves_with_it(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    cid = open_chat(qtbot, w, LONG, title="story")
    user = w.ctx.store.add_message(cid, "user", "Write a very long story about a robot gardener.")
    w.ctx.store.add_message(cid, "assistant", "Once upon a time.", parent_id=user.id)
    w.controller.reload()
    wait_for(qtbot, lambda: user.id in w.view.widgets)
    w.controller.message_action("edit", user.id)
    wait_for(qtbot, lambda: w.composer.editing_id == user.id)
    w.composer.set_text(STORY)
    wait_for(qtbot, lambda: w.composer.tokens.text().endswith("tokens"))  # counted while the engine is free
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)  # an edit starts its reply at once
    wait_for(qtbot, lambda: bool(streaming_text(w).strip()))
    assert w.composer.text() == ""
    # Not the sent text's count under the empty box until the reply ends (seen under Xvfb: "9 tokens").
    wait_for(qtbot, lambda: w.composer.tokens.text() == "" or w.controller.running is None)
    assert w.controller.running is not None and w.composer.tokens.text() == ""
    w.controller.sending.stop_here()
    wait_idle(qtbot, w)


def test_at_1280_px_a_running_summary_leaves_whole_figures_not_cut_ones(qtbot: QtBot, window: MainWindow) -> None:
    from hisho.core.documents.job import JobProgress
    from hisho.gui.shell.widgets import ElidedLabel

    w = window
    open_chat(qtbot, w, SHORT, title="Colours and stories")
    w.resize(1240, 680)  # 1280×720 less openbox's frame, as seen under Xvfb
    bar = w.status
    bar.set_model("SmolLM2-135M-Instruct.Q4_1", 4096)
    bar.device.setText("CPU")
    bar.speed.setText("29.8 tok/s · 1/2 threads (CPU busy)")  # what a busy two-core laptop showed
    bar.ttft.setText("TTFT 135 ms")
    bar.ram.setText("RAM 460 MiB")
    panel = w.documents.panel
    panel.show_progress(JobProgress("summarizing", 5, 9, 42.0, "GPL-3", "chunk 5 of 9"))

    def cut() -> list[str]:
        labels = [lab for lab in bar.findChildren(ElidedLabel) if lab.isVisible() and lab.text()]
        return [lab.text() for lab in labels if lab.width() < lab.fontMetrics().horizontalAdvance(lab.text())]

    qtbot.wait(50)  # the bar lays itself out
    assert cut() == []  # before: "Smol…", "C…", "TTFT 135 …", "RAM 460 …", "Summarizing: chunk 5 …" and more
    assert bar.speed.isVisible() and panel.stage.isVisible() and panel.eta.isVisible()
    assert not bar.device.isVisible()  # the least useful figure stepped aside whole
    panel.finish()
    wait_for(qtbot, lambda: all(lab.isVisible() for lab in (bar.model, bar.device, bar.ttft, bar.ram)))
    assert cut() == []
    assert w.minimumSizeHint().width() <= 900  # and stepping aside never widens the window


def ink(menu: QMenu, image: QImage, action: QAction) -> int:
    """How far the action's most contrasting pixel (its text) is from its background, in lightness."""
    r = menu.actionGeometry(action)
    bg = image.pixelColor(r.left() + 2, r.center().y()).lightness()
    return max(abs(image.pixelColor(x, y).lightness() - bg) for x in range(r.left(), r.right())
               for y in range(r.top(), r.bottom()))


def test_disabled_items_look_disabled_in_both_themes(qtbot: QtBot) -> None:
    from hisho.gui.shell import theme

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before, sheet, was = app.palette(), app.styleSheet(), theme.current()
    try:
        for t in (theme.LIGHT, theme.DARK):
            theme.apply(app, t)
            pal = app.palette()
            for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
                assert pal.color(QPalette.ColorGroup.Disabled, role) != pal.color(QPalette.ColorGroup.Active, role)
            menu = QMenu()  # as Chat → Stop is drawn where nothing runs
            qtbot.addWidget(menu)
            on, off = menu.addAction("Regenerate"), menu.addAction("Stop")
            off.setEnabled(False)
            menu.ensurePolished()
            menu.resize(menu.sizeHint())  # drawn without popping up (offscreen cannot grab the keyboard)
            image = menu.grab().toImage()

            dim, full = ink(menu, image, off), ink(menu, image, on)
            assert dim < full - 20, (t.name, dim, full)
    finally:
        theme.apply(app, was)
        app.setPalette(before)
        app.setStyleSheet(sheet)
