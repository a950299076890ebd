"""HTTP to an OpenAI-compatible server with the standard library only: JSON calls and a server-sent-events
stream. No Qt, no llama_cpp.

Rules of use:
- Every failure becomes a ``RemoteError`` whose text is one line for the user, naming the engine: "cannot
  reach", "TLS check failed", "refused the API key", "has no model", "is not an OpenAI-compatible server",
  "dropped the connection". The partial reply is the caller's to keep.
- TLS certificates are verified unless the endpoint says otherwise (a self-signed workstation).
- The API key goes into the ``Authorization`` header and nowhere else: never into a log line, an error or a
  ``repr`` (``Endpoint.api_key`` has ``repr=False``).
- ``SSEStream.close()`` may be called from any thread: it shuts the socket, so the server sees the client go
  and stops decoding (llama-server, vLLM and SGLang all abort a request whose connection closed).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hisho.core.engine.protocol import ErrorKind
from hisho.core.errors import EngineError

log = logging.getLogger("hisho.remote")

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0      # a 70B model's first token after a long prompt may take minutes


@dataclass(frozen=True)
class Endpoint:
    """One configured remote engine. ``base_url`` is the server root (``http://host:8080``; a trailing
    ``/v1`` is accepted and dropped)."""

    name: str
    base_url: str
    verify_tls: bool = True
    api_key: str = field(default="", repr=False, compare=False)

    @property
    def root(self) -> str:
        url = self.base_url.strip().rstrip("/")
        return url[:-3] if url.endswith("/v1") else url


class RemoteError(EngineError):
    """A remote engine failed; ``str()`` is one line for the user. ``status``: the HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(ErrorKind.REMOTE, message)
        self.status = status


def _connection(ep: Endpoint, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(ep.root)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{ep.name}: {ep.base_url!r} is not an http:// or https:// address")
    if parts.scheme == "https":
        ctx = ssl.create_default_context()
        if not ep.verify_tls:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    return conn, parts.path.rstrip("/")


def _headers(ep: Endpoint, body: bool) -> dict[str, str]:
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "hisho"}
    if body:
        headers["Content-Type"] = "application/json"
    if ep.api_key:
        headers["Authorization"] = f"Bearer {ep.api_key}"
    return headers


def _describe(ep: Endpoint, exc: BaseException) -> RemoteError:
    """A network exception as the one line the user sees."""
    where = f"{ep.name} ({ep.root})"
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, ssl.SSLCertVerificationError):
        return RemoteError(f"TLS check failed for {where}: {exc.verify_message or exc.reason}; fix the "
                           "server's certificate or turn off TLS verification for this engine")
    if isinstance(exc, ssl.SSLError):
        return RemoteError(f"TLS error talking to {where}: {exc.reason or exc}")
    if isinstance(exc, ConnectionRefusedError):
        return RemoteError(f"cannot reach {where}: connection refused (is the server running?)")
    if isinstance(exc, socket.gaierror):
        return RemoteError(f"cannot reach {where}: unknown host")
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return RemoteError(f"{where} did not answer in time")
    if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead,
                        BrokenPipeError)):
        return RemoteError(f"{where} dropped the connection")
    if isinstance(exc, http.client.HTTPException):
        return RemoteError(f"{where} is not an OpenAI-compatible server (bad HTTP: {type(exc).__name__})")
    if isinstance(exc, OSError):
        return RemoteError(f"cannot reach {where}: {exc.strerror or exc}")
    return RemoteError(f"{where}: {type(exc).__name__}: {exc}")


def _http_error(ep: Endpoint, path: str, status: int, raw: bytes) -> RemoteError:
    try:
        err = json.loads(raw.decode("utf-8", "replace"))
        detail = err.get("error", err) if isinstance(err, dict) else err
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
        text = " ".join(str(detail).split())[:200]
    except ValueError:
        text = " ".join(raw.decode("utf-8", "replace").split())[:120]
    where = f"{ep.name} ({ep.root})"
    if status in (401, 403):
        return RemoteError(f"{where} refused the API key (HTTP {status}); check the key in Settings → Engines",
                           status)
    if status == 404 and "model" in text.lower():
        return RemoteError(f"{where} has no such model: {text}", status)
    if status in (404, 405) and path.endswith(("/chat/completions", "/models")):
        return RemoteError(f"{where} is not an OpenAI-compatible server (HTTP {status} for {path})", status)
    if status == 503:
        return RemoteError(f"{where} is busy or still loading its model (HTTP 503): {text}", status)
    return RemoteError(f"{where} answered HTTP {status}: {text}", status)


def call(ep: Endpoint, method: str, path: str, body: dict[str, Any] | None = None, *,
         timeout: float = 30.0) -> Any:
    """One JSON request; the decoded answer. Raises RemoteError (with ``status`` for HTTP errors)."""
    try:
        conn, prefix = _connection(ep, timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, prefix + path, body=data, headers=_headers(ep, data is not None))
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
    except Exception as exc:
        raise _describe(ep, exc) from None
    if resp.status >= 400:
        raise _http_error(ep, path, resp.status, raw)
    try:
        return json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except ValueError:
        raise RemoteError(f"{ep.name} ({ep.root}) is not an OpenAI-compatible server (not JSON from {path})",
                          resp.status) from None


class SSEStream:
    """A POST whose answer is ``text/event-stream``: iterate for each event's decoded JSON ``data``; the
    iteration ends at ``data: [DONE]`` (``done`` true) or when the server closes the stream."""

    def __init__(self, ep: Endpoint, path: str, body: dict[str, Any], *,
                 timeout: float = READ_TIMEOUT_S) -> None:
        self.ep, self.path = ep, path
        self.done = False
        self._closed = threading.Event()
        try:
            self._conn, prefix = _connection(ep, CONNECT_TIMEOUT_S)
            self._conn.connect()
            # http.client hands the socket to the response and forgets it (HTTP/1.0-style answers): keep our
            # own reference so close() can shut it from another thread.
            self._sock = self._conn.sock
            if self._sock is not None:
                self._sock.settimeout(timeout)
            self._conn.request("POST", prefix + path, body=json.dumps(body).encode(),
                               headers=_headers(ep, True))
            self._resp = self._conn.getresponse()
        except Exception as exc:
            self.close()
            raise _describe(ep, exc) from None
        if self._resp.status >= 400:
            raw = self._resp.read()
            self.close()
            raise _http_error(ep, path, self._resp.status, raw)
        kind = self._resp.getheader("Content-Type", "")
        if "text/event-stream" not in kind and "json" in kind:   # a server that ignores "stream": answer whole
            self._whole: Any = self._resp.read()
        else:
            self._whole = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._whole is not None:
            try:
                yield json.loads(self._whole.decode("utf-8"))
            except ValueError:
                raise RemoteError(f"{self.ep.name} is not an OpenAI-compatible server (bad JSON)") from None
            self.done = True
            return
        data: list[str] = []
        try:
            while not self._closed.is_set():
                line = self._resp.readline()
                if not line:
                    return                      # closed: ``done`` stays False unless [DONE] came
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                if text.startswith("data:"):
                    data.append(text[5:].lstrip())
                elif text == "" and data:
                    payload, data = "\n".join(data), []
                    if payload == "[DONE]":
                        self.done = True
                        return
                    try:
                        ev = json.loads(payload)
                    except ValueError:
                        raise RemoteError(f"{self.ep.name} sent a stream that is not OpenAI-compatible") from None
                    if isinstance(ev, dict) and "error" in ev and "choices" not in ev:
                        err = ev["error"]
                        msg = err.get("message", err) if isinstance(err, dict) else err
                        raise RemoteError(f"{self.ep.name}: {' '.join(str(msg).split())[:200]}")
                    if isinstance(ev, dict):
                        yield ev
        except RemoteError:
            raise
        except Exception as exc:
            if self._closed.is_set():
                return                          # our own close(): a stop, not a failure
            raise _describe(self.ep, exc) from None

    def close(self) -> None:
        """Any thread: shut the socket so the server stops decoding; a reader blocked on it returns."""
        self._closed.set()
        conn = getattr(self, "_conn", None)
        sock = getattr(self, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if conn is not None:
            conn.close()
        resp = getattr(self, "_resp", None)
        if resp is not None:
            resp.close()
