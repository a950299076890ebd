"""One window per user and data folder (issue 16, point 7): a second ``hisho gui`` brings the first window to the
front instead of being refused; the local socket is the user's only and survives a crash's leftover."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.core import instance, paths
from hisho.gui.shell.app import welcome_second_launches
from hisho.gui.shell.main_window import MainWindow
from hisho.gui.shell.single import FirstInstance, hand_over, server_name
from tests.gui.conftest import QT_NOISE


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")  # offscreen; X11 and Wayland do
def test_a_second_launch_brings_the_first_window_forward(qtbot: QtBot, window: MainWindow) -> None:
    folder = paths.data_dir()
    instance.acquire(folder, role="gui")  # what cli.main does for the first window
    first = FirstInstance(folder)
    second: subprocess.Popen[str] | None = None
    try:
        welcome_second_launches(first, window)
        got: list[dict[str, object]] = []
        first.activated.connect(got.append)
        window.showMinimized()
        qtbot.waitUntil(window.isMinimized)
        second = subprocess.Popen([sys.executable, "-m", "hisho.cli", "gui", "--model", "other.gguf"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
        qtbot.waitUntil(lambda: second.poll() is not None, timeout=120_000)  # the first answers meanwhile
        _, err = second.communicate()
        assert second.returncode == 0, err
        assert "already open" in err and "brought to the front" in err
        assert got == [{"op": "activate", "model": "other.gguf"}]
        assert window.isVisible() and not window.isMinimized()
        assert "to use other.gguf, choose it in the model picker" in window.toast.text()
    finally:
        if second is not None and second.poll() is None:
            second.kill()  # a second launch that did not hand over must not outlive the test
            second.communicate()
        first.close()
        instance.release()
    assert not Path(first.name).exists()  # the socket goes with the window


def test_a_crash_leftover_socket_is_replaced_and_only_the_user_can_connect(qtbot: QtBot, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    name = server_name(folder)
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(name)  # a window killed with -9 leaves its socket file behind
    leftover.close()
    first = FirstInstance(folder)
    try:
        assert first.listening
        assert stat.S_IMODE(os.stat(name).st_mode) & 0o077 == 0  # nobody else can connect
        got: list[dict[str, object]] = []
        first.activated.connect(got.append)
        with ThreadPoolExecutor(1) as pool:
            bad = pool.submit(_raw_exchange, name, b'{"op": "quit"}\n')
            qtbot.waitUntil(bad.done, timeout=30_000)
            assert bad.result() == b"error\n" and got == []
            good = pool.submit(hand_over, folder)
            qtbot.waitUntil(good.done, timeout=30_000)
            assert good.result() is True
        assert got == [{"op": "activate", "model": None}]
    finally:
        first.close()
    with ThreadPoolExecutor(1) as pool:  # nobody listens any more: the second launch is told so (and refused)
        assert pool.submit(hand_over, folder, None, 0.5).result() is False


def _raw_exchange(name: str, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(name)
        s.sendall(line)
        answer = b""
        while not answer.endswith(b"\n"):
            part = s.recv(100)
            if not part:
                break
            answer += part
        return answer
