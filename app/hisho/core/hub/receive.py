"""The byte path of a download: the body of the GET into the partial file, hashed as it arrives (docs/hub.md,
"The byte path").

The request, its retries and its HTTP errors are huggingface_hub's (``http_stream_backoff``,
``hf_raise_for_status``, on its httpx session: proxies, TLS, certificates, redirects). What is ours is reading the
body. huggingface_hub's ``http_get`` reads it through httpx's ``iter_bytes``: h11 copies every byte three times and
httpx's chunker three more, with Python work per read, which held the download to a third of curl's speed on
loopback (profile in docs/hub.md). Here the body of a plain HTTP/1.1 answer with a Content-Length is read
straight from the connection's socket: ``recv_into`` a reusable buffer, ``os.write`` of what arrived, and the same
buffer hashed on another thread (hashlib releases the GIL), so no byte is copied in Python. Any other answer
(chunked, compressed, HTTP/2, TLS inside a proxy's TLS) is read through httpx's ``iter_raw``.

What arrived is written before the next read, so a process killed mid-download loses at most one read (plus what
the kernel held for it); pause and cancel are checked after every read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from hisho.core.hub.errors import HubError

log = logging.getLogger("hisho.hub")

MIB = 1024**2
BUFFER = 4 * MIB         # one receive buffer; the hashing thread works on whole buffers
BUFFERS = 4              # the hashing thread may lag this many buffers behind the socket
WRITE_AT = 256 * 1024    # write once this much arrived (a TLS read returns one 16 KiB record at a time)
WRITEBACK = 32 * MIB     # bytes between writeback hints (the final fsync then waits for the tail only)
RETRIES = 5              # attempts without a byte of progress before a transient failure is final
RAW = True               # read a plain body from the socket (tests turn it off to cover the httpx path)


_spare: list[bytearray] = []  # buffers of finished downloads, for the next one
_spare_lock = threading.Lock()


class Stopped(Exception):
    """The download was paused or cancelled (``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BrokeOff(ConnectionError):
    """The server closed the connection before the body was complete."""


class _Hasher:
    """sha256 and writeback hints on a thread of their own, fed whole buffers. The bytes are in the file before
    they are queued here, so a kill loses nothing more; only the hash lags (at most ``BUFFERS`` buffers)."""

    def __init__(self, start: Any, fd: int, pos: int) -> None:
        self.h, self.fd, self.pos, self.flushed = start, fd, pos, pos
        self.pool: queue.Queue[bytearray] = queue.Queue()
        self.made = 0
        self.q: queue.Queue[tuple[bytes | memoryview, bytearray | None] | None] = queue.Queue()
        self.error: BaseException | None = None
        self.t = threading.Thread(target=self._run, name="hisho-sha256", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while (item := self.q.get()) is not None:
            data, buf = item
            try:
                if self.error is None:
                    self.h.update(data)
                    self.pos += len(data)
                    if self.pos - self.flushed >= WRITEBACK and hasattr(os, "posix_fadvise"):
                        # Linux: FADV_DONTNEED starts writeback of the stretch now, and drops it from the page
                        # cache once written (a model file is read back by the loader later, not now)
                        os.posix_fadvise(self.fd, self.flushed, self.pos - self.flushed, os.POSIX_FADV_DONTNEED)
                        self.flushed = self.pos
            except BaseException as exc:  # noqa: BLE001 - handed to the receiving thread at close()
                self.error = exc
            finally:
                if isinstance(data, memoryview):
                    data.release()
                if buf is not None:
                    self.pool.put(buf)

    def buffer(self) -> bytearray:
        """A free receive buffer (waits while every buffer is queued for hashing). Buffers are kept for the
        next download of this process: a fresh one costs its page faults."""
        if self.pool.empty() and self.made < BUFFERS:
            self.made += 1
            with _spare_lock:
                return _spare.pop() if _spare else bytearray(BUFFER)
        return self.pool.get()

    def feed(self, data: bytes | memoryview, buf: bytearray | None = None) -> None:
        """Hash ``data`` (already in the file); ``buf``, when given, goes back to the pool afterwards."""
        self.q.put((data, buf))

    def close(self) -> Any:
        """Wait for the queued data; returns the hashlib object."""
        self.q.put(None)
        self.t.join()
        with _spare_lock:
            while not self.pool.empty() and len(_spare) < BUFFERS:
                _spare.append(self.pool.get())
        if self.error is not None:
            raise self.error
        return self.h


class Receiver:
    """Writes a file's bytes from ``pos`` on into ``fd`` (the partial, opened for appending) and hashes them."""

    def __init__(self, fd: int, pos: int, start_hash: Any, stop: Callable[[], str | None],
                 on_bytes: Callable[[int], None]) -> None:
        self.fd, self.pos, self.stop, self.on_bytes = fd, pos, stop, on_bytes
        self.hasher = _Hasher(start_hash, fd, pos)
        self.raw_used = False  # the last attempt read the socket itself (tests)

    def run(self, url: str, headers: dict[str, str], size: int, timeout: float) -> Any:
        """Receive until the file has ``size`` bytes, resuming after transient failures (``RETRIES`` attempts
        without progress, a second apart, as huggingface_hub's http_get does). Returns the hashlib object."""
        import httpx2

        # the network's failures; a disk's (ENOSPC, EIO) are not worth a retry
        transient = (httpx2.TransportError, ConnectionError, TimeoutError, ssl.SSLError)
        tries = RETRIES
        try:
            while self.pos < size:
                before = self.pos
                try:
                    self._attempt(url, headers, size, timeout)
                except transient as exc:
                    if self.pos > before:
                        tries = RETRIES
                    if tries <= 0:
                        raise
                    tries -= 1
                    log.warning("download from %s interrupted at %d of %d bytes (%s); resuming",
                                urlsplit(url).netloc, self.pos, size, exc)
                    time.sleep(1)
        finally:
            hashed = self.hasher.close()
        return hashed

    def _attempt(self, url: str, headers: dict[str, str], size: int, timeout: float) -> None:
        from huggingface_hub.utils import (  # type: ignore[attr-defined]  # lazily exported
            hf_raise_for_status,
            http_stream_backoff,
        )

        ask = dict(headers)
        ask["Accept-Encoding"] = "identity"  # a compressed answer could not be resumed at a byte offset
        if self.pos:
            ask["Range"] = f"bytes={self.pos}-"
        with http_stream_backoff("GET", url, headers=ask, timeout=timeout, retry_on_exceptions=(),
                                 retry_on_status_codes=(408, 429)) as r:
            hf_raise_for_status(r)
            if self.pos and r.status_code == 200:  # the server ignored the Range: start the file again
                log.info("the server sent the whole file again instead of a range; starting over")
                self._restart()
            elif r.status_code == 206:
                got = r.headers.get("Content-Range", "")
                if not got.startswith(f"bytes {self.pos}-"):
                    raise HubError(f"the server sent another range than asked ({got!r}); try again")
            end = size
            if r.headers.get("Content-Length") and self.pos + int(r.headers["Content-Length"]) != size:
                raise HubError(f"the server sends {int(r.headers['Content-Length'])} bytes from {self.pos} of a "
                               f"file the hub says has {size}; try again later")
            chunks = r.iter_raw()
            sock = _plain_socket(r) if RAW else None
            self.raw_used = sock is not None
            if sock is None:
                self._take(chunks, end)
            else:
                # h11 may hold body bytes that came with the headers: its first Data event hands over all of them
                # (or one read, when it held none); after that the socket has everything that is left
                self._take(_first(chunks), end)
                if self.pos < end:
                    self._drain(sock, end, timeout)
            if self.pos < end:
                raise BrokeOff(f"the connection closed at {self.pos} of {end} bytes")

    def _restart(self) -> None:
        self.hasher.close()
        os.ftruncate(self.fd, 0)
        self.pos = 0
        self.hasher = _Hasher(hashlib.sha256(), self.fd, 0)

    def _check(self) -> None:
        reason = self.stop()
        if reason:
            raise Stopped(reason)

    def _write(self, view: memoryview) -> None:
        n = len(view)
        while view:
            view = view[os.write(self.fd, view):]
        self.pos += n
        self.on_bytes(n)

    def _take(self, chunks: Iterator[bytes], end: int) -> None:
        for chunk in chunks:
            if not chunk:
                continue
            chunk = chunk[:end - self.pos]
            self._write(memoryview(chunk))
            self.hasher.feed(chunk)
            self._check()
            if self.pos >= end:
                return

    def _drain(self, sock: socket.socket, end: int, timeout: float) -> None:
        """recv_into a buffer, write what arrived, hand full buffers to the hasher."""
        sock.settimeout(timeout)
        buf = self.hasher.buffer()
        view = memoryview(buf)
        filled = written = 0  # bytes of buf received / written to the file
        try:
            while self.pos + (filled - written) < end:
                want = min(BUFFER - filled, end - self.pos - (filled - written))
                n = sock.recv_into(view[filled:filled + want])
                if n == 0:
                    break  # closed early: the caller says so after what arrived is written
                filled += n
                if filled - written >= WRITE_AT or filled == BUFFER or self.pos + (filled - written) >= end:
                    self._write(view[written:filled])
                    written = filled
                    self._check()
                if filled == BUFFER:
                    self.hasher.feed(view[:filled], buf)
                    buf = self.hasher.buffer()
                    view = memoryview(buf)
                    filled = written = 0
        finally:
            if filled > written:  # a pause, a kill in the making or an error: keep what arrived
                self._write(view[written:filled])
            if filled:
                self.hasher.feed(view[:filled], buf)
            else:
                view.release()
                self.hasher.pool.put(buf)


def _first(chunks: Iterator[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        yield chunk
        return


def _plain_socket(r: Any) -> socket.socket | None:
    """The connection's socket when the body can be read from it as it is: HTTP/1.1, a Content-Length, no
    transfer or content coding, and the socket's own TLS (if any) is the one to the URL's host."""
    if r.http_version != "HTTP/1.1" or "Content-Length" not in r.headers or "Transfer-Encoding" in r.headers:
        return None
    if r.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None
    stream = r.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if not isinstance(sock, socket.socket):
        return None
    url = urlsplit(str(r.url))
    tls = url.scheme == "https"
    if tls != isinstance(sock, ssl.SSLSocket):  # TLS inside an https proxy's TLS: the socket carries the proxy's
        return None
    if isinstance(sock, ssl.SSLSocket) and sock.server_hostname != url.hostname:
        return None
    return sock
