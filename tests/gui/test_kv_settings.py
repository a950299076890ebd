"""What the KV cache costs and saves, in the real window on the real model: the sidebar badge after a turn, the
Settings → KV cache page (list, budget with immediate eviction, per-row delete, Clear all with its confirmation,
KV type), and that none of it touches conversation text."""

from __future__ import annotations

import re

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from hisho.core import paths
from hisho.core import settings as settings_mod
from hisho.core.conversations.store import ChatSettings
from hisho.core.units import format_bytes
from hisho.gui.chat.kv_status import badge, human_seconds
from hisho.gui.settings.preferences import KVCachePage, PreferencesDialog
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle

SHORT = ChatSettings(max_tokens=8, temperature=0.0)
BADGE = re.compile(r"^\d+ (KiB|MiB) · (<1|\d+) s$")


def kv_files() -> set[str]:
    return {p.name for p in paths.kv_dir().rglob("*") if p.is_file()}


def chat_turn(qtbot: QtBot, w: MainWindow, title: str, text: str) -> int:
    conv = w.ctx.store.create(title, settings=SHORT)
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    reply(qtbot, w, conv.id, text)
    return int(conv.id)


def reply(qtbot: QtBot, w: MainWindow, cid: int, text: str) -> None:
    if w.controller.current is None or w.controller.current.id != cid:
        w.controller.select(cid)
        wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == cid)
    w.controller.send(text)
    wait_idle(qtbot, w)
    wait_for(qtbot, lambda: bool(w.sidebar.kv_badge(cid) and w.sidebar.kv_badge(cid)[0]))  # type: ignore[index]


def texts(w: MainWindow, cid: int) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in w.ctx.store.branch(cid)]


def open_settings(qtbot: QtBot, w: MainWindow) -> KVCachePage:
    action = next(a for a in w.file_menu.actions() if a.text() == "Settings…")
    action.trigger()
    dialog = w._preferences  # type: ignore[attr-defined]
    assert isinstance(dialog, PreferencesDialog) and dialog.isVisible()
    page = dialog.kv_page
    wait_for(qtbot, lambda: page.refreshes > 0)
    return page


def answer_confirmation(button_role: QMessageBox.ButtonRole) -> None:
    """Click a button of the Clear all confirmation once it is on screen (it runs its own event loop)."""
    def click() -> None:
        for top in QApplication.topLevelWidgets():
            if isinstance(top, QMessageBox) and top.objectName() == "ConfirmClearKV" and top.isVisible():
                for b in top.buttons():
                    if top.buttonRole(b) == button_role:
                        assert isinstance(b, QPushButton)
                        b.click()
                        return
        QTimer.singleShot(50, click)
    QTimer.singleShot(50, click)


def test_badge_text() -> None:
    assert badge(None)[0] == "" and "not saved" in badge(None)[1]
    assert format_bytes(3 * 2**30 // 2) == "1.5 GiB" and format_bytes(12 * 2**20) == "12 MiB"
    assert human_seconds(0.3) == "<1 s" and human_seconds(9.4) == "9 s" and human_seconds(600) == "10 min"


def test_sidebar_settings_budget_delete_and_clear_all(qtbot: QtBot, window: MainWindow) -> None:
    w = window
    a = chat_turn(qtbot, w, "Colours", "Name three colours.")
    text, tip = w.sidebar.kv_badge(a) or ("", "")
    assert BADGE.match(text), text
    assert "Saved KV cache" in tip and "tokens" in tip and "Colours" in tip
    assert kv_files()

    # The page lists the chat with the same size as its badge; the total counts every file once.
    page = open_settings(qtbot, w)
    assert f"conv:{a}" in page.owners()
    assert page.table.item(0, 0).text() == "Colours"  # type: ignore[union-attr]
    assert page.table.item(0, 1).text() == text.split(" · ")[0]  # type: ignore[union-attr]
    assert page.report is not None and page.report.total_bytes == sum(
        p.stat().st_size for p in paths.kv_dir().rglob("*.hkv"))
    assert "of 10.0 GiB" in page.usage_label.text()

    # Lowering the budget evicts at once: the files go, the row says the KV is not saved.
    page.budget.setValue(0.0)
    page.apply_budget()
    wait_for(qtbot, lambda: not kv_files() and (w.sidebar.kv_badge(a) or ("x", ""))[0] == ""
             and page.owners() == [])
    assert "not saved" in (w.sidebar.kv_badge(a) or ("", ""))[1]
    assert settings_mod.load()["kv_disk_budget_bytes"] == 0
    assert "removed the KV of 1 item" in page.status.text()

    # Back to 10 GiB; a second chat is saved, and its row's Delete removes only its KV.
    page.budget.setValue(10.0)
    page.apply_budget()
    wait_for(qtbot, lambda: w.ctx.kv.session.budget_bytes == 10 * 2**30)
    b = chat_turn(qtbot, w, "Numbers", "Count to three.")
    wait_for(qtbot, lambda: page.owners() == [f"conv:{b}"])
    page.table.cellWidget(0, 5).click()  # type: ignore[union-attr]
    wait_for(qtbot, lambda: page.owners() == [] and not kv_files())
    wait_for(qtbot, lambda: (w.sidebar.kv_badge(b) or ("x", ""))[0] == "")

    # Clear all: Cancel keeps everything; confirming empties the KV folder and leaves every text as it was.
    reply(qtbot, w, a, "And three more?")
    wait_for(qtbot, lambda: page.owners() == [f"conv:{a}"])
    before = {cid: texts(w, cid) for cid in (a, b)}
    assert len(before[a]) == 4 and len(before[b]) == 2
    answer_confirmation(QMessageBox.ButtonRole.RejectRole)
    page.clear_button.click()
    qtbot.wait(300)
    assert kv_files() and page.owners() == [f"conv:{a}"]
    answer_confirmation(QMessageBox.ButtonRole.DestructiveRole)
    page.clear_button.click()
    wait_for(qtbot, lambda: page.owners() == [] and "Cleared" in page.status.text())
    assert not kv_files()
    wait_for(qtbot, lambda: (w.sidebar.kv_badge(a) or ("x", ""))[0] == "")
    assert {cid: texts(w, cid) for cid in (a, b)} == before
    assert {c.id for c in w.ctx.store.conversations()} >= {a, b}


def test_kv_type_setting_is_saved_for_the_next_load(qtbot: QtBot, window: MainWindow) -> None:
    page = open_settings(qtbot, window)
    assert page.kv_type.currentData() == "f16"
    page.kv_type.setCurrentIndex(page.kv_type.findData("q8_0"))
    wait_for(qtbot, lambda: settings_mod.load()["kv_type"] == "q8_0")
    assert "next model load" in page.status.text()
    assert window.ctx.engine.load_params is not None and window.ctx.engine.load_params.type_k == "f16"


def test_documents_are_listed_and_kept_when_the_budget_evicts(qtbot: QtBot, window: MainWindow) -> None:
    from hisho.core.documents.ask import precompute_kv
    from hisho.core.kv.session import document_owner

    w = window
    session = w.ctx.kv.session
    a = chat_turn(qtbot, w, "Colours", "Name three colours.")
    doc = document_owner("ab" * 32)
    text = "Quarterly report. Revenue grew in every region; costs stayed flat. " * 12
    w.ctx.executor.submit("engine", lambda: precompute_kv(w.ctx.engine, [{"role": "system", "content": text}],
                                                         session, doc))
    wait_idle(qtbot, w)
    page = open_settings(qtbot, w)
    wait_for(qtbot, lambda: set(page.owners()) == {f"conv:{a}", doc})
    row = page.owners().index(doc)
    assert page.table.item(row, 0).text() == "Document " + "ab" * 6  # type: ignore[union-attr]
    assert page.table.item(row, 4).text() == "document"  # type: ignore[union-attr]
    assert "1 chat, 1 document" in page.usage_label.text()
    # The chat was used before the document, and after it too: the chat still goes first.
    session.submit(lambda: session.index.touch(f"conv:{a}"))
    doc_bytes = session.usage(doc).bytes
    session.submit(lambda: session.set_budget(doc_bytes))
    wait_for(qtbot, lambda: page.owners() == [doc])
    assert session.usage(doc).bytes == doc_bytes and session.usage(f"conv:{a}").bytes == 0
    wait_for(qtbot, lambda: (w.sidebar.kv_badge(a) or ("x", ""))[0] == "")
