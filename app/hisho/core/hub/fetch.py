"""One file from the hub into a resumable partial beside its final place (docs/hub.md, "Downloads").

1. huggingface_hub's ``get_hf_file_metadata`` (HEAD on ``resolve``) gives the commit, the ETag (an LFS file's
   sha256), the size and the CDN location;
2. the free space is checked against what is still missing (``free_bytes``; the message says the shortfall);
3. huggingface_hub's ``http_get`` streams the bytes into ``.<name>.<etag>.part``, starting with an HTTP Range at
   the partial's size. (``hf_hub_download`` writes to a per-process temporary file and deletes it on failure
   since huggingface_hub 1.x, so it cannot resume across runs.) Each chunk goes to the file unbuffered, then to
   the hashing thread; pause and cancel are checked between chunks;
4. the sha256 is compared with the hub's; a mismatch removes the partial and says so; a match renames the file
   into place.

The receiving thread does only the socket reads and the file writes: hashing and the writeback hints run on a
thread of their own, so a slow disk or a large hash update never keeps the socket unread (unread bytes pile up
in the kernel's receive buffer, and a killed process loses them: they are sent again on resume).
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hisho.core.errors import UserError
from hisho.core.hub.errors import HubError, endpoint, hub_call, translate
from hisho.core.hub.token import get_token
from hisho.core.units import GIB, MIB

log = logging.getLogger("hisho.hub")

RESERVE = 64 * MIB           # left free after a download (the OS and the app need some room)
CHUNK = 256 * 1024           # bytes per write: pause and progress answer within one chunk
WRITEBACK = 32 * MIB         # bytes between writeback hints
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHA1 = re.compile(r"^[0-9a-f]{40}$")


class DiskFull(UserError):
    pass


class HashMismatch(UserError):
    pass


class Stopped(Exception):
    """The download was paused or cancelled (``reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def free_bytes(folder: Path) -> int:
    """Free bytes where ``folder`` lives (tests patch this to play a full disk)."""
    return shutil.disk_usage(folder).free


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= 100 * MIB else f"{n / MIB:.0f} MiB"


def partial_path(dest: Path, etag: str) -> Path:
    return dest.with_name(f".{dest.name}.{etag[:16]}.part")


class _Hasher:
    """sha256 and writeback hints on their own thread. hashlib and posix_fadvise release the GIL, so this
    overlaps receiving the next chunk; only the hash lags behind (at most ``depth`` chunks): the bytes are in the
    file before they are queued here, so a kill loses nothing more."""

    def __init__(self, start: Any, fd: int, pos: int, depth: int = 16) -> None:
        self.h, self.fd, self.pos, self.flushed = start, fd, pos, pos
        self.q: queue.Queue[bytes | None] = queue.Queue(depth)
        self.t = threading.Thread(target=self._run, name="hisho-sha256", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while (data := self.q.get()) is not None:
            self.h.update(data)
            self.pos += len(data)
            if self.pos - self.flushed >= WRITEBACK and hasattr(os, "posix_fadvise"):
                # Linux: FADV_DONTNEED starts writeback of the stretch now, so the final fsync has only the tail
                # left to wait for instead of the whole file
                os.posix_fadvise(self.fd, self.flushed, self.pos - self.flushed, os.POSIX_FADV_DONTNEED)
                self.flushed = self.pos

    def update(self, data: bytes) -> None:
        self.q.put(data)

    def close(self) -> Any:
        """Wait for the queued chunks; returns the hashlib object."""
        self.q.put(None)
        self.t.join()
        return self.h


class _Sink:
    """The file object http_get writes to: writes each chunk through, hands it to the hasher, reports bytes, and
    stops between chunks."""

    def __init__(self, fd: int, path: Path, hasher: _Hasher, stop: Callable[[], str | None],
                 on_bytes: Callable[[int], None]) -> None:
        self.fd, self.path, self.hasher, self.stop, self.on_bytes = fd, path, hasher, stop, on_bytes

    def write(self, data: bytes) -> int:
        reason = self.stop()
        if reason:
            raise Stopped(reason)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        self.hasher.update(data)
        self.on_bytes(len(data))
        return len(data)

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)

    def seek(self, pos: int, whence: int = 0) -> int:
        return os.lseek(self.fd, pos, whence)

    def truncate(self, size: int | None = None) -> int:
        # http_get truncates when a server ignored the Range and sent the whole file again: hash from scratch
        size = self.tell() if size is None else size
        os.ftruncate(self.fd, size)
        self.hasher.close()
        fresh = hashlib.sha256()
        hash_file(self.path, fresh, limit=size)
        self.hasher = _Hasher(fresh, self.fd, size)
        return size


class _Quiet:
    """A progress-bar class for http_get that shows nothing (our own progress comes from the sink)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: float | None = 1) -> None:
        pass


def _larger_reads() -> None:
    """httpcore (under huggingface_hub's httpx) reads the socket 64 KiB at a time and runs its HTTP parser per
    read: at a few hundred MB/s that per-read Python work is a large share of a download's CPU (profile in
    docs/hub.md). 1 MiB reads make 16x fewer of them. The class attribute is httpcore's own knob for this."""
    try:
        from httpcore2._sync.http11 import HTTP11Connection
    except ImportError:  # another httpcore: leave it as it is
        return
    HTTP11Connection.READ_NUM_BYTES = max(HTTP11Connection.READ_NUM_BYTES, 1 << 20)


def hash_file(path: Path, hasher: Any, limit: int | None = None) -> None:
    left = path.stat().st_size if limit is None else limit
    with path.open("rb") as fh:
        while left > 0 and (chunk := fh.read(min(CHUNK * 8, left))):
            hasher.update(chunk)
            left -= len(chunk)


def _git_oid(path: Path) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {path.stat().st_size}\0".encode())
    hash_file(path, h)
    return h.hexdigest()


def fetch_part(repo: str, part: str, revision: str, dest: Path, *, expected_sha: str = "",
               stop: Callable[[], str | None] = lambda: None,
               on_bytes: Callable[[int], None] = lambda n: None,
               on_start: Callable[[int, int], None] = lambda have, size: None) -> tuple[str, str]:
    """Download one file of ``repo`` into ``dest``, resuming a partial; returns (sha256, commit)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazily exported

    what = f"{repo}:{part}"
    url = hf_hub_url(repo, part, revision=revision or None, endpoint=endpoint())
    token = get_token()
    with hub_call(what):
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint())
    etag, size, location = str(meta.etag or ""), int(meta.size or 0), str(meta.location)
    sha = etag if SHA256.match(etag) else expected_sha
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(dest, etag or "noetag")
    for stale in dest.parent.glob(f".{dest.name}.*.part"):
        if stale != partial:  # a partial of an older version of the file: it cannot be continued
            log.info("removing %s: the file changed on the hub", stale.name)
            stale.unlink(missing_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:
        partial.unlink()
        have = 0
    missing = size - have
    free = free_bytes(dest.parent)
    if free < missing + RESERVE:
        raise DiskFull(f"not enough free space for {Path(part).name}: it needs {gib(missing)} more, "
                       f"{gib(free)} is free on {dest.parent} ({gib(missing + RESERVE - free)} short)")
    on_start(have, size)
    start = hashlib.sha256()
    if have:
        hash_file(partial, start)
    same_host = urlsplit(location).netloc == urlsplit(url).netloc
    headers = build_hf_headers(token=token if same_host else False)  # the token never goes to the CDN
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK  # 10 MiB by default: pause and progress would lag 10 MiB behind
    _larger_reads()
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.lseek(fd, 0, os.SEEK_END)  # tell() is where http_get's data starts (it rewinds to there on a 200)
        sink = _Sink(fd, partial, _Hasher(start, fd, have), stop, on_bytes)
        try:
            http_get(location, sink, resume_size=have, headers=headers, expected_size=size,  # type: ignore[arg-type]
                     displayed_filename=Path(part).name, tqdm_class=_Quiet)  # type: ignore[arg-type]
        except (Stopped, KeyboardInterrupt):
            raise
        except Exception as exc:  # network, server and HTTP errors: one line, the partial is kept
            if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
                raise HubError(f"{what}: the download ended early; resume to continue") from None
            raise translate(exc, what) from None
        finally:
            hashed = sink.hasher.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    got = hashed.hexdigest()
    if sha and got != sha:
        partial.unlink(missing_ok=True)
        raise HashMismatch(f"{Path(part).name} arrived damaged (its sha256 differs from the hub's); "
                           "the partial file was removed — download it again")
    if not sha and SHA1.match(etag) and _git_oid(partial) != etag:
        partial.unlink(missing_ok=True)
        raise HashMismatch(f"{Path(part).name} arrived damaged (its git hash differs from the hub's); "
                           "the partial file was removed — download it again")
    os.replace(partial, dest)
    return got, str(meta.commit_hash or revision)
