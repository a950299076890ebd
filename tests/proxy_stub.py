"""A small forwarding proxy on loopback: plain-HTTP requests in absolute form are relayed (the answer streamed
through as it comes), ``CONNECT host:port`` opens a tunnel (how an https server is reached through a proxy).
``seen`` lists what went through it ("GET http://…", "CONNECT 127.0.0.1:…"). A real proxy over TCP, not a mock.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class _Proxy(BaseHTTPRequestHandler):
    server: ProxyServer

    def log_message(self, format: str, *args: Any) -> None:   # quiet
        pass

    def _relay(self) -> None:
        self.server.seen.append(f"{self.command} {self.path}")
        target = urlsplit(self.path)
        if not target.hostname:
            self.send_error(400, "absolute-form request expected")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
        try:
            upstream.request(self.command, target.path + (f"?{target.query}" if target.query else ""),
                             body=body or None, headers=headers)
            resp = upstream.getresponse()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            while chunk := resp.read1(65536):
                self.wfile.write(chunk)
                self.wfile.flush()
        finally:
            upstream.close()
        self.close_connection = True

    do_GET = do_POST = _relay

    def do_CONNECT(self) -> None:
        self.server.seen.append(f"CONNECT {self.path}")
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=30)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        ends = [self.connection, upstream]
        try:
            while True:
                ready, _, _ = select.select(ends, [], [], 30)
                if not ready:
                    break
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        return
                    (upstream if src is self.connection else self.connection).sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()
            self.close_connection = True


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Proxy)
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> ProxyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
