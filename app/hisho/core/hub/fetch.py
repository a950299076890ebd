"""One file from the hub into a resumable partial beside its final place (docs/hub.md, "Downloads").

1. huggingface_hub's ``get_hf_file_metadata`` (HEAD on ``resolve``) gives the commit, the ETag (an LFS file's
   sha256), the size and the CDN location;
2. the partial ``.<name>.<etag>.part`` is cut back to what may be trusted (``partial.trust``: all of it within this
   boot of the machine, its last durable checkpoint after a restart);
3. the free space is checked against what is still missing (``free_bytes``; the message says the shortfall);
4. ``receive.Receiver`` streams the rest into the partial with an HTTP Range at its size (huggingface_hub's request
   and retries; the body read from the socket into reusable buffers and hashed on another thread), while
   ``partial.Checkpoints`` makes it durable every 64 MiB. (``hf_hub_download`` writes to a per-process temporary
   file and deletes it on failure since huggingface_hub 1.x, so it cannot resume across runs.)
5. the sha256 is compared with the hub's; a mismatch removes the partial and says so; a match syncs the file and
   renames it into place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hisho.core.atomic import replace_durably
from hisho.core.errors import UserError
from hisho.core.hub import partial as partial_mod
from hisho.core.hub.errors import HubError, endpoint, hub_call, translate
from hisho.core.hub.receive import BrokeOff, Receiver, Stopped
from hisho.core.hub.token import get_token
from hisho.core.units import MIB, format_bytes

log = logging.getLogger("hisho.hub")

__all__ = ["DiskFull", "HashMismatch", "Stopped", "fetch_part", "partial_path"]

RESERVE = 64 * MIB           # left free after a download (the OS and the app need some room)
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHA1 = re.compile(r"^[0-9a-f]{40}$")


class DiskFull(UserError):
    pass


class HashMismatch(UserError):
    pass


def free_bytes(folder: Path) -> int:
    """Free bytes where ``folder`` lives (tests patch this to play a full disk)."""
    return shutil.disk_usage(folder).free


def partial_path(dest: Path, etag: str) -> Path:
    return dest.with_name(f".{dest.name}.{etag[:16]}.part")


def hash_file(path: Path, hasher: Any, limit: int | None = None) -> None:
    left = path.stat().st_size if limit is None else limit
    with path.open("rb") as fh:
        while left > 0 and (chunk := fh.read(min(4 * MIB, left))):
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
            partial_mod.remove(stale)
    have = partial_mod.trust(partial)
    if have > size:
        partial.unlink()
        have = partial_mod.trust(partial)
    missing = size - have
    free = free_bytes(dest.parent)
    if free < missing + RESERVE:
        raise DiskFull(f"not enough free space for {Path(part).name}: it needs {format_bytes(missing)} more, "
                       f"{format_bytes(free)} is free on {dest.parent} ({format_bytes(missing + RESERVE - free)} "
                       "short)")
    on_start(have, size)
    start = hashlib.sha256()
    if have:
        hash_file(partial, start)
    same_host = urlsplit(location).netloc == urlsplit(url).netloc
    headers = build_hf_headers(token=token if same_host else False)  # the token never goes to the CDN
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        checkpoints = partial_mod.Checkpoints(fd, partial, have)

        def wrote(n: int) -> None:
            on_bytes(n)
            checkpoints.grew(rx.pos)

        rx = Receiver(fd, have, start, stop, wrote)
        try:
            hashed = rx.run(location, headers, size, constants.HF_HUB_DOWNLOAD_TIMEOUT)
        except (Stopped, KeyboardInterrupt):
            raise
        except BrokeOff:
            raise HubError(f"{what}: the download ended early; resume to continue") from None
        except Exception as exc:  # network, server and HTTP errors: one line, the partial is kept
            raise translate(exc, what) from None
        finally:
            checkpoints.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    got = hashed.hexdigest()
    if sha and got != sha:
        partial_mod.remove(partial)
        raise HashMismatch(f"{Path(part).name} arrived damaged (its sha256 differs from the hub's); "
                           "the partial file was removed — download it again")
    if not sha and SHA1.match(etag) and _git_oid(partial) != etag:
        partial_mod.remove(partial)
        raise HashMismatch(f"{Path(part).name} arrived damaged (its git hash differs from the hub's); "
                           "the partial file was removed — download it again")
    replace_durably(partial, dest)  # registered next: the name must survive a crash with the bytes it names
    partial_mod.ledger_path(partial).unlink(missing_ok=True)
    return got, str(meta.commit_hash or revision)
