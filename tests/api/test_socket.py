"""The API's connections send small writes at once (TCP_NODELAY). With Nagle's algorithm on, a stream's first
chunk waited for the client's delayed ACK of the response headers (~40 ms on Linux) on about half the requests:
the API's first-token time. asyncio turns Nagle off only on sockets whose ``proto`` is TCP, and the API binds its
own socket."""

from __future__ import annotations

import socket

import httpx

from hisho.api.backend import Backend
from hisho.api.server import ApiServer
from hisho.core.engine.client import EngineClient


def test_accepted_connections_have_nagle_off() -> None:
    engine = EngineClient()  # never started: /health does not ask the engine
    server = ApiServer(Backend(engine, "model", {}, 16), "key")
    server.start()
    try:
        with httpx.Client() as client:  # keeps the connection open after the request
            assert client.get(server.url.removesuffix("/v1") + "/health").status_code == 200
            assert server._server is not None
            conns = list(server._server.server_state.connections)
            assert conns, "uvicorn lists no open connection"
            for conn in conns:
                sock = conn.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.stop()
        engine.close()
