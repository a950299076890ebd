"""Settings → Your data: the folders shown are the user's, and "Remove all my data" deletes them only after the
confirmation, once the window has closed and nothing has them open."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QPushButton
from pytestqt.qtbot import QtBot

from hisho.core import paths
from hisho.gui.settings.data_page import DataPage
from hisho.gui.settings.preferences import open_preferences
from hisho.gui.shell.app import close
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import make_window


def answer(role: QMessageBox.ButtonRole) -> None:
    def click() -> None:
        for top in QApplication.topLevelWidgets():
            if isinstance(top, QMessageBox) and top.objectName() == "ConfirmRemoveData" and top.isVisible():
                for b in top.buttons():
                    if top.buttonRole(b) == role:
                        assert isinstance(b, QPushButton)
                        b.click()
                        return
        QTimer.singleShot(50, click)
    QTimer.singleShot(50, click)


def data_page(w: MainWindow) -> DataPage:
    dialog = open_preferences(w)
    page = dialog.findChild(DataPage)
    assert page is not None
    return page


def test_remove_all_my_data(qtbot: QtBot, hisho_home: Path, default_model_path: Path) -> None:
    w = make_window(qtbot)
    conv = w.ctx.store.create("keep me?")
    assert paths.database_path().exists() and conv.id
    page = data_page(w)
    shown = " ".join(label.text() for label in page.findChildren(QLabel))
    assert all(str(hisho_home / f) in shown for f in ("data", "config", "cache", "logs"))
    answer(QMessageBox.ButtonRole.RejectRole)
    assert page.confirm_remove() is False
    assert w.isVisible() and not getattr(w, "remove_data_on_exit", False)

    answer(QMessageBox.ButtonRole.DestructiveRole)
    assert page.confirm_remove() is True
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=10_000)
    assert paths.database_path().exists()  # nothing is deleted while the window's services still run
    close(w)
    for folder in ("data", "config", "cache", "logs"):
        assert not (hisho_home / folder).exists(), folder
