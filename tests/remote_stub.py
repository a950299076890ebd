"""A small misbehaving OpenAI-compatible server on loopback, for the remote engine's failure cases: bad HTTP,
a stream dropped mid-reply, a slow first byte, a refused key, a missing model, a server that is not
OpenAI-compatible. A real HTTP server (the standard library's), not a mock: the engine talks to it over TCP.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"


class _Handler(BaseHTTPRequestHandler):
    server: StubServer

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
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
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


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str = "ok", delay_s: float = 0.0, models: tuple[str, ...] = (MODEL,)) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode, self.delay_s, self.models = mode, delay_s, models
        self.requests: list[dict[str, Any]] = []
        self.seen_auth: list[str] = []
        self.client_left = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
