"""A Hugging Face hub-shaped HTTP server on 127.0.0.1, for tests and ``hisho bench hub``.

It answers the requests huggingface_hub 2.x makes (read from its source: ``HfApi.list_models``, ``model_info``,
``list_repo_tree``, ``get_paths_info``, ``get_hf_file_metadata``, ``http_get``, ``HfFileSystem``) the way the hub
does:

- ``GET /api/models?search=&sort=&limit=&filter=`` with cursor paging in a ``Link: <…>; rel="next"`` header;
- ``GET /api/models/OWNER/NAME[/revision/REV]`` with ``siblings`` (sizes, blob ids and LFS sha256 with
  ``blobs=true``);
- ``GET /api/models/OWNER/NAME/tree/REV[/PATH]`` and ``POST …/paths-info/REV``;
- ``HEAD/GET /OWNER/NAME/resolve/REV/PATH``: ``X-Repo-Commit``, ``ETag``; an LFS file answers 302 to a "CDN" on
  another host name (``localhost`` instead of ``127.0.0.1``, so the client does not follow it for metadata, as
  with the real CDN) with ``X-Linked-Etag`` (its sha256) and ``X-Linked-Size``; the CDN serves HTTP ranges;
- a gated repository: resolve answers 401 ``X-Error-Code: GatedRepo`` without a valid ``Authorization``.

Faults for tests: ``throttle`` (bytes/s), ``corrupt`` (one flipped byte in the body, headers unchanged),
``die_after`` (serve N body bytes, then the server goes away: connection closed, listener shut). Every body
byte served is counted per file (``served``), so a test can tell how many bytes a resume sent again.
No model weights anywhere: tests and the bench write their own GGUF files.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("hisho.bench")



@dataclass
class HubFile:
    path: str
    local: Path
    size: int
    sha256: str
    git_oid: str
    lfs: bool


@dataclass
class HubRepo:
    repo_id: str
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)
    gated: bool = False
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2026-01-01T00:00:00.000Z"
    tags: list[str] = field(default_factory=lambda: ["gguf"])

    def summary(self) -> dict[str, Any]:
        return {"_id": self.commit[:24], "id": self.repo_id, "modelId": self.repo_id,
                "author": self.repo_id.split("/")[0], "downloads": self.downloads, "likes": self.likes,
                "lastModified": self.last_modified, "createdAt": self.last_modified, "tags": self.tags,
                "library_name": "gguf", "private": False, "gated": "auto" if self.gated else False,
                "sha": self.commit}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def git_blob_oid(path: Path) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class FakeHub:
    """``with FakeHub() as hub: hub.add_file("o/r", "x.gguf", path)``; point ``HF_ENDPOINT`` at ``hub.url``."""

    def __init__(self, *, page_size: int = 50, token: str = "hf_test_token") -> None:
        self.repos: dict[str, HubRepo] = {}
        self.page_size = page_size
        self.token = token
        self.throttle: float | None = None       # body bytes per second, None = as fast as possible
        self.corrupt: set[str] = set()           # "repo/path" served with one byte flipped
        self.die_after: int | None = None        # body bytes until the server goes away
        self.ignore_range: set[str] = set()      # "repo/path" answered 200 with the whole file to a Range
        self.served: dict[str, int] = {}         # "repo/path" -> body bytes sent
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._sent_total = 0
        hub = self

        from hisho_dev.hub_http import HubHandler

        class Handler(HubHandler):
            owner = hub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cdn = f"http://localhost:{self.port}"
        self._thread: threading.Thread | None = None
        self.down = False

    # ----- content ----------------------------------------------------------------------------------------

    def add_repo(self, repo_id: str, **kw: Any) -> HubRepo:
        if repo_id not in self.repos:
            commit = hashlib.sha1(repo_id.encode(), usedforsecurity=False).hexdigest()
            self.repos[repo_id] = HubRepo(repo_id, commit, **kw)
        return self.repos[repo_id]

    def add_file(self, repo_id: str, path: str, local: Path, *, lfs: bool = True,
                 sha256: str | None = None) -> HubFile:
        """Serve ``local`` as ``path`` in ``repo_id``. ``sha256`` may be given for a large sparse file that no
        test downloads (hashing gigabytes of holes costs seconds); otherwise it is computed."""
        repo = self.add_repo(repo_id)
        size = local.stat().st_size
        digest = sha256 or sha256_of(local)
        oid = git_blob_oid(local) if size < (64 << 20) and not sha256 else hashlib.sha1(
            digest.encode(), usedforsecurity=False).hexdigest()
        f = HubFile(path, local, size, digest, oid, lfs)
        repo.files[path] = f
        return f

    # ----- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> FakeHub:
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread = None
        self.server.server_close()

    def go_away(self) -> None:
        """The server disappears: open connections are dropped and the port refuses new ones."""
        self.down = True
        threading.Thread(target=self.stop, daemon=True).start()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, key: str, n: int) -> int:
        """Record ``n`` body bytes of ``key``; returns how many of them may still be sent before dying."""
        with self._lock:
            allowed = n
            if self.die_after is not None:
                allowed = max(0, min(n, self.die_after - self._sent_total))
            self._sent_total += allowed
            self.served[key] = self.served.get(key, 0) + allowed
            return allowed


def main() -> None:  # pragma: no cover - a manual tool: python -m hisho_dev.hub_server DIR...
    import sys

    hub = FakeHub()
    for arg in sys.argv[1:]:
        for p in sorted(Path(arg).glob("*.gguf")):
            hub.add_file(f"local/{Path(arg).name}", p.name, p)
    hub.start()
    sys.stderr.write(f"HF_ENDPOINT={hub.url}\n")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
