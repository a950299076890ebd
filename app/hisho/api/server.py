"""Running the API: uvicorn on a loopback socket, in the foreground (``hisho serve``) or on a background thread
(the window's Settings → API switch). No Qt.

Rules of use: ``ApiServer(backend, key, port=0, host="127.0.0.1")``; ``bind()`` opens the socket (port 0: a free
one) so the port is known before serving; ``run()`` blocks until ``stop()`` (or Ctrl-C); ``start()`` runs it
on a thread and returns once it accepts connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import anyio.lowlevel
import uvicorn

from hisho.api.app import make_app
from hisho.api.backend import Backend
from hisho.core.errors import UserError

log = logging.getLogger("hisho.api")

LOOPBACK = "127.0.0.1"


class ApiServer:
    def __init__(self, backend: Backend, key: str, *, port: int = 0, host: str = LOOPBACK,
                 cors_origins: list[str] | None = None) -> None:
        self.backend = backend
        self.host, self.port = host, port
        self.app = make_app(backend, key, cors_origins)
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def bind(self) -> None:
        # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto says TCP, and
        # accepted sockets take the listener's. With Nagle on, a stream's first chunk waited for the client's
        # delayed ACK of the headers: +40 ms of first-token time on about half the requests (measured).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise UserError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        sock.listen(128)
        self.port = int(sock.getsockname()[1])
        self._sock = sock

    def _make_server(self) -> uvicorn.Server:
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        self._server = server
        return server

    def run(self) -> None:
        """Serve until ``stop()`` or Ctrl-C (blocks)."""
        if self._sock is None:
            self.bind()
        assert self._sock is not None
        asyncio.run(_serve(self._make_server(), self._sock))

    def start(self, timeout: float = 10.0) -> None:
        """Serve on a background thread; returns once it accepts connections."""
        if self._sock is None:
            self.bind()
        server = self._make_server()
        sock = self._sock
        assert sock is not None

        def serve() -> None:
            asyncio.run(_serve(server, sock))

        self._thread = threading.Thread(target=serve, name="hisho-api", daemon=True)
        self._thread.start()
        for _ in range(int(timeout / 0.02)):
            if server.started or not self._thread.is_alive():
                break
            threading.Event().wait(0.02)
        if not server.started:
            raise UserError(f"the API server did not start on {self.host}:{self.port}")
        log.info("API listening on %s", self.url)

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
    # anyio loads its asyncio backend on first use, which is the first streamed response (Starlette's
    # StreamingResponse runs in an anyio task group): ~20 ms on an idle laptop, ~100 ms on a busy one, all of it
    # added to that request's first-token time. Load it before accepting requests.
    await anyio.lowlevel.checkpoint()
    await server.serve(sockets=[sock])
