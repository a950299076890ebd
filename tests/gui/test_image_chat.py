"""Pictures in the window: a text-only model's composer says it cannot see images instead of taking one; on the
true-shape vision pair (hisho.bench.projector) a pasted picture waits in the composer as a thumbnail, goes with
the message, shows on the sent message and is read by the model (the image's tokens in the reply's prompt)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QColor, QDropEvent, QImage
from pytestqt.qtbot import QtBot

from hisho.bench import projector
from hisho.core.conversations import images as chat_images
from hisho.core.conversations.store import DONE, ChatSettings
from hisho.gui.chat.message_widget import MessageWidget
from tests.gui.conftest import make_window, wait_for, wait_idle, wait_reply


def _paste(w: object, color: str) -> None:
    image = QImage(48, 32, QImage.Format.Format_RGB32)
    image.fill(QColor(color))
    mime = QMimeData()
    mime.setImageData(image)
    w.composer.edit.insertFromMimeData(mime)  # type: ignore[attr-defined]   # what Ctrl+V does with an image


def test_a_pasted_picture_is_refused_by_a_text_model_and_read_by_a_vision_model(qtbot: QtBot, tmp_path: Path,
                                                                                 default_model_path: Path) -> None:
    w = make_window(qtbot)
    try:
        tray = w.composer.images
        _paste(w, "#c80a0a")
        wait_for(qtbot, lambda: "cannot see images" in tray.line.text(), 30_000)
        assert tray.names() == [] and w.composer.text() == ""   # nothing taken, no path pasted as text

        pair = projector.pair("shape:llava-tiny")
        assert pair is not None
        w.controller.switch_model(str(pair[0]), override=True)
        wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
                 and w.ctx.engine.load_params.model_path == str(pair[0]), 300_000)
        wait_idle(qtbot, w)
        assert w.ctx.engine.load_info.get("vision") is True

        conv = w.ctx.store.create("Picture chat", settings=ChatSettings(temperature=0.0, max_tokens=8))
        w.controller.refresh(conv.id)
        w.controller.select(conv.id)
        wait_idle(qtbot, w)
        _paste(w, "#c80a0a")
        wait_for(qtbot, lambda: len(tray.names()) == 1, 30_000)
        assert tray.isVisible() and w.composer.button.isEnabled()
        name = tray.names()[0]
        assert chat_images.path(name).is_file()
        known = {m.id for m in w.ctx.store.branch(conv.id)}
        w.composer.set_text("What is in this picture?")
        w.composer.submit()
        wait_reply(qtbot, w, conv.id, known)
        assert tray.names() == []   # sent: the composer is empty of it
        user, reply = w.ctx.store.branch(conv.id)[-2:]
        assert json.loads(user.images) == [name] and reply.status == DONE
        n_text = w.ctx.engine.count_tokens(messages=[{"role": "user", "content": "What is in this picture?"}])
        assert reply.prompt_tokens is not None and reply.prompt_tokens >= n_text + 16   # the picture was read
        shown = [mw for mw in w.view.findChildren(MessageWidget) if mw.message is not None
                 and mw.message.id == user.id]
        assert shown and "pictures" in shown[0].extras   # the sent message shows its thumbnail

        dropped = tmp_path / "garden.png"   # a PNG dropped on the window: a picture for the next message
        QImage(40, 40, QImage.Format.Format_RGB32).save(str(dropped))
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(dropped))])
        drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                          Qt.KeyboardModifier.NoModifier)
        assert w.documents.eventFilter(w, drop)
        wait_for(qtbot, lambda: len(tray.names()) == 1, 30_000)
        assert not w.documents.running   # not taken for a document to summarize
    finally:
        w.close()


def test_an_image_chat_reopens_after_a_restart_with_its_thumbnail_and_goes_on(qtbot: QtBot,
                                                                              default_model_path: Path) -> None:
    """A chat with a picture, written as the window saves one; a new window on the vision pair shows the
    picture on the message and answers the next message with the picture still in the prompt."""
    from hisho.core.conversations.store import ConversationStore
    from hisho.core.db import Database
    from hisho.core.paths import database_path

    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    image = QImage(48, 32, QImage.Format.Format_RGB32)
    image.fill(QColor("#0a0ac8"))
    from PySide6.QtCore import QBuffer, QIODevice
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")  # type: ignore[call-overload]
    name = chat_images.keep(bytes(buf.data().data()))
    store = ConversationStore(Database(database_path()))
    conv = store.create("Blue picture", settings=ChatSettings(temperature=0.0, max_tokens=8))
    u = store.add_message(conv.id, "user", "What colour is this?", images=json.dumps([name]))
    store.add_message(conv.id, "assistant", "Blue.", parent_id=u.id)
    store.close()

    w = make_window(qtbot)
    try:
        w.controller.switch_model(str(pair[0]), override=True)
        wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
                 and w.ctx.engine.load_params.model_path == str(pair[0]), 300_000)
        wait_idle(qtbot, w)
        w.controller.refresh(conv.id)
        w.controller.select(conv.id)
        wait_for(qtbot, lambda: w.view.built_count() == 2)
        shown = [mw for mw in w.view.findChildren(MessageWidget) if mw.message is not None
                 and mw.message.id == u.id]
        assert shown and "pictures" in shown[0].extras
        known = {m.id for m in w.ctx.store.branch(conv.id)}
        w.composer.set_text("And the shape?")
        w.composer.submit()
        wait_reply(qtbot, w, conv.id, known)
        reply = w.ctx.store.branch(conv.id)[-1]
        n_text = w.ctx.engine.count_tokens(messages=[{"role": "user", "content": "What colour is this?"},
                                                     {"role": "assistant", "content": "Blue."},
                                                     {"role": "user", "content": "And the shape?"}])
        assert reply.status == DONE and reply.prompt_tokens is not None and reply.prompt_tokens >= n_text + 16
    finally:
        w.close()
