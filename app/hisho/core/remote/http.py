"""HTTP to an OpenAI-compatible server: JSON calls and a server-sent-events stream, on httpx2 (the HTTP client
huggingface_hub already brings) with one connection pool per server (``pool``). No Qt, no llama_cpp.

Rules of use:
- Every failure becomes a ``RemoteError`` whose text is one line for the user, naming the engine: "cannot
  reach", "TLS check failed", "refused the API key", "has no model", "is not an OpenAI-compatible server",
  "dropped the connection", and "through the proxy …" when a proxy was in the way. The partial reply is the
  caller's to keep.
- TLS certificates are verified unless the endpoint says otherwise (a self-signed workstation).
- A server on this machine or the LAN is reached directly; any other goes through the system proxy
  (``HTTPS_PROXY``, ``NO_PROXY``). ``Endpoint.use_proxy`` overrides that choice per engine.
- The API key goes into the ``Authorization`` header and nowhere else: never into a log line, an error or a
  ``repr`` (``Endpoint.api_key`` has ``repr=False``).
- Calls share one pool of kept-alive connections per server; a call the server closed without answering, on a
  kept-alive connection it had just dropped, is sent once more on a new connection; nothing else is retried.
  Each stream has a connection of its own (``pool.client(keep=False)``), so a stop can always shut it.
- ``SSEStream.close()`` may be called from any thread, also while ``open()`` still waits for the answer: it
  shuts the socket, so the server sees the client go and stops decoding (llama-server, vLLM and SGLang all abort
  a request whose connection closed). Event data is read as the SSE format says (one space after ``data:`` is
  dropped, not all leading whitespace).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hisho.core.engine.protocol import ErrorKind
from hisho.core.errors import EngineError
from hisho.core.remote import pool

if TYPE_CHECKING:
    # Imported where a request is made: the settings pages and the saved engine choice need ``Endpoint``
    # only, and httpx2 is a few hundred milliseconds of imports.
    import httpx2

log = logging.getLogger("hisho.remote")

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0      # a 70B model's first token after a long prompt may take minutes


@dataclass(frozen=True)
class Endpoint:
    """One configured remote engine. ``base_url`` is the server root (``http://host:8080``; a trailing
    ``/v1`` is accepted and dropped). ``use_proxy``: None follows the address (see ``proxied``)."""

    name: str
    base_url: str
    verify_tls: bool = True
    api_key: str = field(default="", repr=False, compare=False)
    use_proxy: bool | None = None

    @property
    def root(self) -> str:
        url = self.base_url.strip().rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    @property
    def proxied(self) -> bool:
        """Whether requests may go through the system proxy: as set, else not for a local or LAN address."""
        if self.use_proxy is not None:
            return self.use_proxy
        return not pool.is_local_host(urlsplit(self.root).hostname or "")

    @property
    def proxy(self) -> str:
        """The proxy requests go through now ('' for directly)."""
        return pool.system_proxy(self.root) if self.proxied else ""

    def with_(self, **changes: Any) -> Endpoint:
        return dataclasses.replace(self, **changes)


class RemoteError(EngineError):
    """A remote engine failed; ``str()`` is one line for the user. ``status``: the HTTP status, if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(ErrorKind.REMOTE, message)
        self.status = status


def _client(ep: Endpoint, keep: bool = True) -> httpx2.Client:
    import httpx2

    parts = urlsplit(ep.root)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{ep.name}: {ep.base_url!r} is not an http:// or https:// address")
    try:
        return pool.client(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}", ep.verify_tls, ep.proxy, keep)
    except (ImportError, ValueError, httpx2.InvalidURL) as exc:   # a SOCKS or malformed proxy setting
        raise RemoteError(f"{ep.name}: the system proxy {pool.shown(ep.proxy)} cannot be used ({exc}); set "
                          "HTTPS_PROXY to an http:// proxy or turn off the proxy for this engine") from None


def _headers(ep: Endpoint) -> dict[str, str]:
    headers = {"Accept": "application/json, text/event-stream"}
    if ep.api_key:
        headers["Authorization"] = f"Bearer {ep.api_key}"
    return headers


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _describe(ep: Endpoint, exc: BaseException) -> RemoteError:
    """A network exception as the one line the user sees."""
    import httpx2

    if isinstance(exc, RemoteError):
        return exc
    where = f"{ep.name} ({ep.root})"
    proxy = ep.proxy
    via = f" through the proxy {pool.shown(proxy)}" if proxy else ""
    causes = list(_causes(exc))

    def cause(*kinds: type[BaseException]) -> BaseException | None:
        return next((c for c in causes if isinstance(c, kinds)), None)

    if (bad := cause(ssl.SSLCertVerificationError)) is not None:
        assert isinstance(bad, ssl.SSLCertVerificationError)
        return RemoteError(f"TLS check failed for {where}{via}: {bad.verify_message or bad.reason}; fix the "
                           "server's certificate or turn off TLS verification for this engine")
    if (tls := cause(ssl.SSLError)) is not None:
        assert isinstance(tls, ssl.SSLError)
        return RemoteError(f"TLS error talking to {where}{via}: {tls.reason or tls}")
    if isinstance(exc, httpx2.ProxyError):
        return RemoteError(f"cannot reach {where}{via}: the proxy refused ({exc}); check HTTPS_PROXY and "
                           "NO_PROXY, or turn off the proxy for this engine in Settings → Engines")
    if isinstance(exc, httpx2.TimeoutException) or cause(TimeoutError, socket.timeout) is not None:
        return RemoteError(f"{where} did not answer in time{via}")
    if cause(ConnectionRefusedError) is not None:
        if proxy:
            return RemoteError(f"cannot reach {where}{via}: the proxy refused the connection; check HTTPS_PROXY, "
                               "or turn off the proxy for this engine in Settings → Engines")
        return RemoteError(f"cannot reach {where}: connection refused (is the server running?)")
    if cause(socket.gaierror) is not None:
        return RemoteError(f"cannot reach {where}{via}: unknown host")
    if isinstance(exc, httpx2.RemoteProtocolError):
        text = str(exc).lower()
        if "disconnected" in text or "peer closed" in text or "incomplete" in text:
            return RemoteError(f"{where} dropped the connection")
        return RemoteError(f"{where} is not an OpenAI-compatible server (bad HTTP: {' '.join(str(exc).split())[:80]})")
    if isinstance(exc, (httpx2.ReadError, httpx2.WriteError)) or cause(ConnectionResetError, BrokenPipeError):
        return RemoteError(f"{where} dropped the connection")
    if isinstance(exc, (httpx2.DecodingError, httpx2.LocalProtocolError, httpx2.SSEError)):
        return RemoteError(f"{where} is not an OpenAI-compatible server ({type(exc).__name__})")
    if isinstance(exc, (httpx2.UnsupportedProtocol, httpx2.InvalidURL)):
        return RemoteError(f"{ep.name}: {ep.base_url!r} is not an http:// or https:// address")
    if (os_err := cause(OSError)) is not None:
        assert isinstance(os_err, OSError)
        return RemoteError(f"cannot reach {where}{via}: {os_err.strerror or os_err}")
    if isinstance(exc, httpx2.ConnectError):
        return RemoteError(f"cannot reach {where}{via}: {exc}")
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
    if status == 407:
        return RemoteError(f"the proxy {pool.shown(ep.proxy)} asks for a password (HTTP 407); put it in "
                           "HTTPS_PROXY, or turn off the proxy for this engine in Settings → Engines", status)
    if status == 404 and "model" in text.lower():
        return RemoteError(f"{where} has no such model: {text}", status)
    if status in (404, 405) and path.endswith(("/chat/completions", "/models")):
        return RemoteError(f"{where} is not an OpenAI-compatible server (HTTP {status} for {path})", status)
    if status == 503:
        return RemoteError(f"{where} is busy or still loading its model (HTTP 503): {text}", status)
    return RemoteError(f"{where} answered HTTP {status}: {text}", status)


class _Tracer:
    """httpcore's trace hook for one attempt: keeps the sockets it opens (so another thread can shut them)
    and whether it opened one at all (a request on a reused connection may be resent once)."""

    def __init__(self, on_socket: Callable[[socket.socket], None] | None = None) -> None:
        self.connected = False
        self._on_socket = on_socket

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(("connect_tcp.started", "connect_unix_socket.started")):
            self.connected = True
        if self._on_socket is not None and event.endswith(("connect_tcp.complete", "start_tls.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                self._on_socket(sock)


def _stale(exc: BaseException, tracer: _Tracer) -> bool:
    import httpx2

    return (isinstance(exc, httpx2.RemoteProtocolError) and not tracer.connected
            and "without sending a response" in str(exc))


def _send(client: httpx2.Client, request: Callable[[_Tracer], httpx2.Request], stream: bool,
          on_socket: Callable[[socket.socket], None] | None = None) -> httpx2.Response:
    import httpx2

    tracer = _Tracer(on_socket)
    try:
        return client.send(request(tracer), stream=stream)
    except httpx2.RemoteProtocolError as exc:
        if not _stale(exc, tracer):
            raise
        log.debug("kept-alive connection was closed by the server; sending again on a new one")
        return client.send(request(_Tracer(on_socket)), stream=stream)


def call(ep: Endpoint, method: str, path: str, body: dict[str, Any] | None = None, *,
         timeout: float = 30.0) -> Any:
    """One JSON request; the decoded answer. Raises RemoteError (with ``status`` for HTTP errors)."""
    client = _client(ep)

    def request(tracer: _Tracer) -> httpx2.Request:
        return client.build_request(method, ep.root + path, json=body, headers=_headers(ep), timeout=timeout,
                                    extensions={"trace": tracer})

    try:
        resp = _send(client, request, stream=False)
        raw = resp.content
    except Exception as exc:
        raise _describe(ep, exc) from None
    if resp.status_code >= 400:
        raise _http_error(ep, path, resp.status_code, raw)
    try:
        return json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except ValueError:
        raise RemoteError(f"{ep.name} ({ep.root}) is not an OpenAI-compatible server (not JSON from {path})",
                          resp.status_code) from None


class SSEStream:
    """A POST whose answer is ``text/event-stream``: ``open()``, then iterate for each event's decoded JSON
    ``data``; the iteration ends at ``data: [DONE]`` (``done`` true) or when the server closes the stream."""

    def __init__(self, ep: Endpoint, path: str, body: dict[str, Any], *,
                 timeout: float = READ_TIMEOUT_S) -> None:
        self.ep, self.path, self._body, self._timeout = ep, path, body, timeout
        self.done = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._resp: httpx2.Response | None = None
        self._whole: bytes | None = None

    def open(self) -> SSEStream:
        """Send the request and wait for the answer's headers. After ``close()`` it returns an empty stream."""
        import httpx2

        client = _client(self.ep, keep=False)        # its own connection: see pool.client
        timeout = httpx2.Timeout(self._timeout, connect=CONNECT_TIMEOUT_S)

        def request(tracer: _Tracer) -> httpx2.Request:
            return client.build_request("POST", self.ep.root + self.path, json=self._body,
                                        headers=_headers(self.ep), timeout=timeout, extensions={"trace": tracer})

        try:
            if self._closed.is_set():
                return self
            resp = _send(client, request, stream=True, on_socket=self._keep_socket)
        except Exception as exc:
            if self._closed.is_set():
                return self                     # our own close() while waiting: a stop, not a failure
            raise _describe(self.ep, exc) from None
        self._resp = resp
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket) and sock not in self._sockets:
            self._keep_socket(sock)             # the stream's own socket after TLS, where the trace gave the raw one
        try:
            if resp.status_code >= 400:
                raw = resp.read()
                resp.close()
                raise _http_error(self.ep, self.path, resp.status_code, raw)
            kind = resp.headers.get("Content-Type", "")
            if "text/event-stream" not in kind and "json" in kind:   # a server that ignores "stream"
                self._whole = resp.read()
                resp.close()
        except RemoteError:
            raise
        except Exception as exc:
            resp.close()
            if not self._closed.is_set():
                raise _describe(self.ep, exc) from None
        return self

    def _keep_socket(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self._closed.is_set():
            self._shut(sock)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import httpx2

        if self._whole is not None:
            try:
                yield json.loads(self._whole.decode("utf-8"))
            except ValueError:
                raise RemoteError(f"{self.ep.name} is not an OpenAI-compatible server (bad JSON)") from None
            self.done = True
            return
        resp = self._resp
        if resp is None:
            return                              # closed before the server answered
        try:
            for sse in httpx2.EventSource(resp):
                if self._closed.is_set():
                    return
                if not sse.data:
                    continue
                if sse.data == "[DONE]":
                    self.done = True
                    return
                try:
                    ev = json.loads(sse.data)
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
        finally:
            self._release(resp)

    def _release(self, resp: httpx2.Response) -> None:
        # Only the reading thread closes the response (httpcore's connection state is not for two threads);
        # another thread's close() shuts the socket, which ends the read here.
        try:
            resp.close()
        except Exception as exc:                # closing a shut connection may complain; it is closed
            log.debug("closing the stream: %s", type(exc).__name__)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Any thread: shut the socket so the server stops decoding; a reader blocked on it returns."""
        self._closed.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)
