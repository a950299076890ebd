"""The API asks the app for its engine per request (``hisho.api.launch.api_server``, the one way a server is
made): after a remote connect its requests go to the remote engine under that model's name, and back to the
built-in one after a disconnect. A whole request whose client leaves is cancelled on that engine too."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hisho.api.launch import api_server
from hisho.api.server import ApiServer
from hisho.core import services
from hisho.core.remote.endpoints import Endpoint
from tests.remote_stub import MODEL, StubServer


@pytest.fixture()
def app(default_model_path: Path) -> Iterator[services.Services]:
    svc = services.build(str(default_model_path), "window", n_ctx=2048)
    svc.load()
    yield svc
    svc.close()


def ask(server: ApiServer, model: str) -> httpx.Response:
    return httpx.post(server.url + "/chat/completions", headers={"Authorization": "Bearer k"}, timeout=120,
                      json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                            "temperature": 0})


def models(server: ApiServer) -> list[str]:
    r = httpx.get(server.url + "/models", headers={"Authorization": "Bearer k"}, timeout=30)
    return [m["id"] for m in r.json()["data"]]


def test_requests_follow_a_remote_connect_and_disconnect(app: services.Services) -> None:
    server = api_server(app, "k")
    server.start()
    try:
        local = app.chat.model_name
        assert models(server) == [local] and ask(server, local).status_code == 200
        with StubServer("ok") as stub:
            app.connect(Endpoint("box", stub.url), MODEL)
            assert models(server) == [MODEL]
            r = ask(server, MODEL)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello from the stub."
            assert ask(server, local).json()["error"]["code"] == "model_not_found"
            app.disconnect()
        assert models(server) == [local]
        r = ask(server, local)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] != "Hello from the stub."
    finally:
        server.stop()


def test_a_whole_request_left_by_its_client_is_cancelled_on_a_remote_engine(app: services.Services) -> None:
    server = api_server(app, "k")
    server.start()
    try:
        with StubServer("endless") as stub:
            app.connect(Endpoint("box", stub.url), MODEL)
            sock = socket.create_connection(("127.0.0.1", server.port))
            body = b'{"model": "%s", "messages": [{"role": "user", "content": "Go on"}]}' % MODEL.encode()
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            deadline = time.monotonic() + 30
            while server.backend.busy == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert server.backend.busy == 1
            time.sleep(0.5)  # past the stub's first words: it streams on until its client goes
            sock.close()
            # The remote stream is closed (the stub sees its client leave) and the request ends.
            assert stub.client_left.wait(30)
            deadline = time.monotonic() + 30
            while server.backend.busy and time.monotonic() < deadline:
                time.sleep(0.02)
            assert server.backend.busy == 0
            app.disconnect()
    finally:
        server.stop()
