"""A small misbehaving OpenAI-compatible server on loopback, for the remote engine's failure cases: bad HTTP,
a stream dropped mid-reply, a slow first byte, a refused key, a missing model, a server that is not
OpenAI-compatible, one that frames its event stream in the spec's less common ways, one that closes a kept-alive
connection without answering. A real HTTP server (the standard library's), not a mock: the engine talks to it
over TCP. ``keep_alive=True`` answers HTTP/1.1 and keeps connections open (``connections`` lists each one);
``tls=(cert, key)`` serves https.
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"


class _Handler(BaseHTTPRequestHandler):
    server: StubServer

    def setup(self) -> None:
        super().setup()
        self.server.connections.append(self.client_address)
        self.served = 0

    def log_message(self, format: str, *args: Any) -> None:   # quiet
        pass

    def _json(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        mode = self.server.mode
        self.served += 1
        if mode == "stale" and self.served == 2:      # the server dropped the idle connection as it was reused
            self.close_connection = True
            return
        self.server.seen_auth.append(self.headers.get("Authorization", ""))
        if mode == "badhttp":
            self.wfile.write(b"HELLO THERE\r\n\r\n")
            self.close_connection = True
            return
        if mode == "html":
            raw = b"<html>router login</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        if mode == "badkey":
            self._json(401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}})
            return
        if self.path.endswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "stub"}
                                                        for m in self.server.models]})
            return
        self._json(404, {"error": {"message": "File Not Found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append(body)
        mode = self.server.mode
        if mode == "nomodel":
            self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            return
        if not self.path.endswith("/chat/completions"):
            self._json(404, {"error": {"message": "File Not Found"}})
            return
        if mode == "slow":
            time.sleep(self.server.delay_s)
            self.server.answered.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if self.protocol_version == "HTTP/1.1":     # the stream's end is the connection's
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if mode == "framing":
            self.wfile.write(_FRAMED)
            return
        words = ["Hello", " from", " the", " stub", "."]
        for i, word in enumerate(words):
            if mode == "drop" and i == 2:
                self.wfile.flush()
                self.connection.shutdown(2)         # the network goes away mid-reply
                self.close_connection = True
                return
            chunk = {"object": "chat.completion.chunk", "model": MODEL,
                     "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            if mode == "endless":
                time.sleep(0.05)
        if mode == "endless":          # keeps streaming until the client goes
            try:
                while True:
                    chunk = {"choices": [{"index": 0, "delta": {"content": " more"}, "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:
                self.server.client_left.set()
                return
        last = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45,
                          "prompt_tokens_details": {"cached_tokens": 32}}}
        self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        self.wfile.flush()


def _chunk(text: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
                      ensure_ascii=False)


# One reply framed every way the SSE format allows: CR, LF and CRLF line ends, a comment, "data:" with and without
# its space, an event split over two data lines, event/id/retry fields, a field without a colon, UTF-8 text.
_FRAMED = (": keep-alive\r\r"
           f"data:{_chunk('Framéd')}\r\r"
           f"event: message\nid: 7\nretry: 1000\ndata: {_chunk(' three')}\n\n"
           f"data: {_chunk(' ways').split(' ', 1)[0]}\r\ndata: {_chunk(' ways').split(' ', 1)[1]}\r\n\r\n"
           "data\n\n"
           'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
           "data: [DONE]\n\n").encode()


class _KeepAlive(_Handler):
    protocol_version = "HTTP/1.1"


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str = "ok", delay_s: float = 0.0, models: tuple[str, ...] = (MODEL,), *,
                 keep_alive: bool = False, tls: tuple[str, str] | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _KeepAlive if keep_alive else _Handler)
        self.mode, self.delay_s, self.models = mode, delay_s, models
        self.requests: list[dict[str, Any]] = []
        self.seen_auth: list[str] = []
        self.connections: list[tuple[str, int]] = []
        self.client_left = threading.Event()
        self.answered = threading.Event()
        self.scheme = "https" if tls else "http"
        if tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*tls)
            self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that leaves mid-stream is what several tests do on purpose: noted, not printed as a crash."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            self.client_left.set()
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
