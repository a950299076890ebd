"""KV persistence in the real window: a finished turn is saved and its size shown; deleting the chat deletes
its KV files; closing the window closes the KV session first."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from hisho.core import paths
from hisho.core.conversations.store import ChatSettings
from hisho.gui.chat.kv_status import describe
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle

SHORT = ChatSettings(max_tokens=12, temperature=0.0)


def kv_files() -> list[str]:
    return sorted(p.name for p in paths.kv_dir().rglob("*.hkv"))


def test_describe() -> None:
    assert describe(0, 0.0) == "KV not saved yet"
    assert describe(94 * 2**20, 21.4) == "KV 94 MiB · resumes ~21 s faster"
    assert describe(300 * 1024, 0.2) == "KV 300 KiB"


def test_turn_is_saved_shown_and_deleted_with_the_chat(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    kv = w.ctx.kv
    conv = w.ctx.store.create("kv", settings=SHORT)
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    w.composer.set_text("Name three colours.")
    w.controller.send("Name three colours.")
    wait_idle(qtbot, w)
    label = w.status.findChildren(type(w.status.model))
    wait_for(qtbot, lambda: any(lb.text().startswith("KV ") and "not saved" not in lb.text() for lb in label))
    assert kv.usage(conv.id).bytes > 0 and kv_files()
    w.sidebar.delete_requested.emit(conv.id)
    wait_for(qtbot, lambda: not kv_files())
    assert kv.usage(conv.id).bytes == 0
    w.close()
    assert kv.session._closed
