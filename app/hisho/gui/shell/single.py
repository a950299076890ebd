"""One window per user and data folder: a second ``hisho gui`` brings the first window to the front.

Who is first is decided by ``hisho.core.instance`` (an OS lock on the data folder, also taken by ``hisho chat``,
which has no window). The first window also listens on a ``QLocalServer``; a second window launch that finds the
lock held by a window connects, sends one JSON line and exits 0 once the first answered ``ok``. The first shows
itself (un-minimized, raised, activated) and, if the second was given ``--model``, says where to switch (the
window command takes no file argument; nothing else is handed over).

The socket (decision in docs/single-instance.md):
- Unix: ``<data folder>/hisho.sock`` (the folder is 0700, hisho.core.paths.protect), or, when that path is too
  long for a socket address, ``$XDG_RUNTIME_DIR`` (also the user's own), else Qt's temp folder; the name carries
  a hash of the data folder, so two ``HISHO_HOME``s are two windows. Windows: a named pipe with the user's name.
- ``UserAccessOption``: only the user can connect (srwx------ on Unix).
- A socket file left by a crash cannot be told from a live one by its name, but the lock can: whoever listens
  holds the data folder's lock, so an address in use is stale; it is removed and the server listens again.

Messages: at most ``MAX_LINE`` bytes, ``{"op": "activate", "model": str | null}``; anything else is answered
``error`` and changes nothing.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

log = logging.getLogger("hisho.gui")

SOCKET_FILE = "hisho.sock"
MAX_LINE = 64 << 10
ANSWER_S = 15.0  # a busy first window answers when its event loop next runs
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def server_name(folder: Path) -> str:
    """The local server's name for the data folder ``folder`` (a path on Unix, a pipe name on Windows)."""
    digest = hashlib.sha256(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if sys.platform == "win32":  # pragma: no cover - Windows
        return f"hisho-{getpass.getuser()}-{digest}"
    own = folder / SOCKET_FILE
    if len(os.fsencode(own)) < _MAX_UNIX_PATH:
        return str(own)
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and len(os.fsencode(runtime)) + 30 < _MAX_UNIX_PATH and os.path.isdir(runtime):
        return f"{runtime}/hisho-{digest}.sock"
    return f"hisho-{os.getuid()}-{digest}"  # Qt puts it in its temp folder; UserAccessOption still guards it


class FirstInstance(QObject):
    """The listening side, created by the window's process once it holds the data folder's lock."""

    activated = Signal(dict)  # a second launch's message, after the window was brought forward

    def __init__(self, folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(folder)
        self.window: QWidget | None = None
        self.server = QLocalServer(self)
        self.server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self.server.newConnection.connect(self._accept)
        if not self.server.listen(self.name):
            # We hold the lock, so no Hisho on this folder is listening: the address is a crash's leftover.
            log.info("local server %s: %s; removing a stale socket", self.name, self.server.errorString())
            QLocalServer.removeServer(self.name)
            if not self.server.listen(self.name):
                log.warning("a second launch cannot reach this window (%s: %s); it will be refused instead",
                            self.name, self.server.errorString())

    @property
    def listening(self) -> bool:
        return self.server.isListening()

    def attach(self, window: QWidget) -> None:
        """The window a second launch brings forward (messages before this only get answered)."""
        self.window = window

    def close(self) -> None:
        self.server.close()  # removes the socket file

    def _accept(self) -> None:
        while (sock := self.server.nextPendingConnection()) is not None:
            sock.readyRead.connect(partial(self._read, sock))
            sock.disconnected.connect(partial(self._gone, sock))
            if sock.bytesAvailable():
                self._read(sock)

    def _gone(self, sock: QLocalSocket) -> None:
        """A client left: our slots are disconnected first, then the socket goes at the next turn of the loop.
        With ``deleteLater`` connected straight to ``disconnected`` the partials (the only Python references to
        the socket's wrapper) were let go inside ``~QLocalSocket``, which crashed in ``~QObject`` in most runs of
        tests/gui/test_single_instance.py."""
        sock.readyRead.disconnect()
        sock.disconnected.disconnect()
        sock.deleteLater()

    def _read(self, sock: QLocalSocket) -> None:
        if not sock.canReadLine():
            if sock.bytesAvailable() > MAX_LINE:
                log.warning("second-launch message over %d bytes; dropped", MAX_LINE)
                sock.abort()
            return
        message = parse(bytes(sock.readLine(MAX_LINE + 1).data()))
        sock.write(b"ok\n" if message is not None else b"error\n")
        sock.flush()
        sock.disconnectFromServer()
        if message is None:
            log.warning("a malformed second-launch message was ignored")
            return
        log.info("a second launch asked for this window: %s", message)
        if self.window is not None:
            bring_forward(self.window)
        self.activated.emit(message)


def parse(line: bytes) -> dict[str, Any] | None:
    """A second launch's message, or None if it is not one."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(message, dict) or message.get("op") != "activate":
        return None
    model = message.get("model")
    if model is not None and not isinstance(model, str):
        return None
    return {"op": "activate", "model": model}


def bring_forward(window: QWidget) -> None:
    """Un-minimize, show, raise and activate ``window`` (a window manager may still only flash it)."""
    state = window.windowState()
    if state & Qt.WindowState.WindowMinimized:
        window.setWindowState((state & ~Qt.WindowState.WindowMinimized) | Qt.WindowState.WindowActive)
    window.show()
    window.raise_()
    window.activateWindow()


def hand_over(folder: Path, model: str | None = None, wait_s: float = 10.0) -> bool:
    """The second launch: ask the first window of ``folder`` to come forward. True once it answered ``ok``;
    False if no window listens within ``wait_s`` (the first may still be starting up) or it refused."""
    name = server_name(folder)
    line = json.dumps({"op": "activate", "model": model}).encode("utf-8") + b"\n"
    deadline = time.monotonic() + wait_s
    while True:
        sock = QLocalSocket()
        sock.connectToServer(name)
        if sock.waitForConnected(1000):
            break
        if time.monotonic() >= deadline:
            log.info("no window listens on %s: %s", name, sock.errorString())
            return False
        time.sleep(0.2)
    sock.write(line)
    sock.waitForBytesWritten(2000)
    answer, end = b"", time.monotonic() + ANSWER_S
    while not answer.endswith(b"\n") and time.monotonic() < end:
        if sock.waitForReadyRead(250):
            answer += bytes(sock.readAll().data())
        elif sock.state() == QLocalSocket.LocalSocketState.UnconnectedState:
            answer += bytes(sock.readAll().data())
            break
    sock.disconnectFromServer()
    if answer != b"ok\n":
        log.warning("the window on %s answered %r (%s)", name, answer, sock.errorString())
    return answer == b"ok\n"
