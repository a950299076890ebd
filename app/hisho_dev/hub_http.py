"""How the hub-shaped test server (``hisho_dev.hub_server.FakeHub``) answers HTTP: the API routes, the
``resolve`` redirects to the "CDN", HTTP ranges, throttling and the faults. What it serves lives in FakeHub."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

if TYPE_CHECKING:
    from hisho_dev.hub_server import FakeHub, HubFile, HubRepo

log = logging.getLogger("hisho.bench")

CHUNK = 1 << 16
BURST = 0.005  # seconds of a throttled link's rate it may send at once after the reader fell behind


class HubHandler(BaseHTTPRequestHandler):
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
        key = f"{repo.repo_id}/{f.path}"
        rng = None if key in hub.ignore_range else self.headers.get("Range")
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
