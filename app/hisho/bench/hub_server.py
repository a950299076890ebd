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
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

log = logging.getLogger("hisho.bench")

CHUNK = 1 << 16
BURST = 0.005  # seconds of a throttled link's rate it may send at once after the reader fell behind


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
        self.served: dict[str, int] = {}         # "repo/path" -> body bytes sent
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._sent_total = 0
        hub = self

        class Handler(_Handler):
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


class _Handler(BaseHTTPRequestHandler):
    owner: FakeHub
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.debug("fake hub: " + format, *args)

    # ----- plumbing ------------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              ctype: str = "application/json") -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(200, json.dumps(data).encode(), headers)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _route(self) -> None:
        hub = self.owner
        if hub.down:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        hub.requests.append((self.command, self.path))
        segs = [s for s in path.split("/") if s]
        if segs[:2] == ["api", "models"]:
            if len(segs) == 2:
                return self._search(query)
            repo = hub.repos.get("/".join(segs[2:4]))
            if repo is None:
                return self._error(401, "Repository Not Found", "RepoNotFound")
            rest = segs[4:]
            if not rest or rest[0] == "revision":
                return self._info(repo, query)
            if rest[0] == "tree":
                return self._tree(repo, "/".join(rest[2:]), query)
            if rest[0] == "paths-info":
                return self._paths_info(repo)
            return self._error(404, "not found")
        if segs[:1] == ["cdn-lfs"] and len(segs) >= 2:
            for repo in hub.repos.values():
                for f in repo.files.values():
                    if f.sha256 == segs[1]:
                        return self._content(repo, f, {})
            return self._error(404, "no such object")
        if len(segs) >= 5 and segs[2] == "resolve":
            repo = hub.repos.get("/".join(segs[:2]))
            if repo is None:
                return self._error(401, "Repository Not Found", "RepoNotFound")
            return self._resolve(repo, "/".join(segs[4:]))
        return self._error(404, "not found")

    def _serve(self) -> None:
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):  # the client went away (a kill, a pause): expected
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's naming
        self._serve()

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self._form = parse_qs(self.rfile.read(length).decode()) if length else {}
        self._serve()

    # ----- API -----------------------------------------------------------------------------------------

    def _search(self, q: dict[str, list[str]]) -> None:
        hub = self.owner
        text = (q.get("search") or [""])[0].lower()
        filters = q.get("filter") or []
        items = [r for r in hub.repos.values() if text in r.repo_id.lower()
                 and all(f in r.tags for f in filters)]
        sort = (q.get("sort") or ["downloads"])[0]
        keys: dict[str, Callable[[HubRepo], Any]] = {"downloads": lambda r: r.downloads, "likes": lambda r: r.likes,
                                                  "lastModified": lambda r: r.last_modified}
        key = keys.get(sort, keys["downloads"])
        items.sort(key=lambda r: (key(r), r.repo_id), reverse=True)
        limit = int((q.get("limit") or [str(hub.page_size)])[0])
        cursor = int((q.get("cursor") or ["0"])[0])
        size = min(limit, hub.page_size)
        page = items[cursor:cursor + size]
        headers = {}
        if cursor + size < len(items):
            nxt = {k: v for k, v in q.items() if k != "cursor"}
            nxt["cursor"] = [str(cursor + size)]
            headers["Link"] = f'<{hub.url}/api/models?{urlencode(nxt, doseq=True)}>; rel="next"'
        self._json([r.summary() for r in page], headers)

    def _info(self, repo: HubRepo, q: dict[str, list[str]]) -> None:
        blobs = (q.get("blobs") or ["false"])[0].lower() == "true"
        siblings = []
        for f in repo.files.values():
            s: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                s.update(size=f.size, blobId=f.git_oid)
                if f.lfs:
                    s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(s)
        data = repo.summary() | {"siblings": siblings, "usedStorage": sum(f.size for f in repo.files.values())}
        self._json(data)

    def _entry(self, f: HubFile) -> dict[str, Any]:
        e: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
        if f.lfs:
            e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
        return e

    def _tree(self, repo: HubRepo, prefix: str, q: dict[str, list[str]]) -> None:
        recursive = (q.get("recursive") or ["false"])[0].lower() == "true"
        out: list[dict[str, Any]] = []
        dirs: set[str] = set()
        base = prefix.strip("/")
        for f in repo.files.values():
            if base and not f.path.startswith(base + "/"):
                continue
            rel = f.path[len(base) + 1:] if base else f.path
            if "/" in rel and not recursive:
                dirs.add((base + "/" if base else "") + rel.split("/")[0])
                continue
            out.append(self._entry(f))
        out += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
        self._json(out)

    def _paths_info(self, repo: HubRepo) -> None:
        wanted = getattr(self, "_form", {}).get("paths", [])
        self._json([self._entry(repo.files[p]) for p in wanted if p in repo.files])

    # ----- files -------------------------------------------------------------------------------------------

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization") or ""
        return auth == f"Bearer {self.owner.token}"

    def _resolve(self, repo: HubRepo, path: str) -> None:
        f = repo.files.get(path)
        base = {"X-Repo-Commit": repo.commit}
        if repo.gated and not self._authorized():
            return self._error(401, f"Access to model {repo.repo_id} is restricted. You must have access to it "
                               "and be authenticated to access it. Please log in.", "GatedRepo")
        if f is None:
            self.send_response(404)
            for k, v in (base | {"X-Error-Code": "EntryNotFound",
                                 "X-Error-Message": "Entry not found", "Content-Length": "0"}).items():
                self.send_header(k, v)
            self.end_headers()
            return
        if f.lfs:
            self.send_response(302)
            headers = base | {"ETag": f'"{f.git_oid}"', "X-Linked-Etag": f'"{f.sha256}"',
                              "X-Linked-Size": str(f.size), "Location": f"{self.owner.cdn}/cdn-lfs/{f.sha256}"
                              f"?name={quote(Path(f.path).name)}", "Content-Length": "0"}
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            return
        self._content(repo, f, base | {"ETag": f'"{f.git_oid}"'})

    def _content(self, repo: HubRepo, f: HubFile, headers: dict[str, str]) -> None:
        hub = self.owner
        start, end = 0, f.size
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a or 0)
            end = min(int(b) + 1, f.size) if b else f.size
            if start >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{f.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        key = f"{repo.repo_id}/{f.path}"
        plain = hub.throttle is None and key not in hub.corrupt and hub.die_after is None
        with f.local.open("rb") as fh:
            if plain:  # the kernel copies: as fast as loopback allows (the download_vs_curl baseline)
                sent = self.connection.sendfile(fh, offset=start, count=end - start)
                hub.count(key, sent)
                return
            fh.seek(start)
            pos, due = start, time.perf_counter()
            while pos < end:
                chunk = bytearray(fh.read(min(CHUNK, end - pos)))
                if key in hub.corrupt and pos <= f.size // 2 < pos + len(chunk):
                    chunk[f.size // 2 - pos] ^= 0xFF
                allowed = hub.count(key, len(chunk))
                if allowed < len(chunk):
                    self.wfile.write(bytes(chunk[:allowed]))
                    self.wfile.flush()
                    hub.go_away()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(bytes(chunk))
                pos += len(chunk)
                if hub.throttle:
                    # A link of this rate: it never delivers faster, also not to make up for a reader that
                    # stopped reading for a while (beyond a burst of BURST seconds' worth).
                    now = time.perf_counter()
                    due = max(due, now - BURST) + len(chunk) / hub.throttle
                    if due > now:
                        time.sleep(due - now)


def main() -> None:  # pragma: no cover - a manual tool: python -m hisho.bench.hub_server DIR...
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
