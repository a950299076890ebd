"""Downloads from the hub: a queue kept in SQLite (component ``downloads``) so that a download paused, cut off or
interrupted by quitting resumes where it stopped, also after a restart.

How a file comes down (docs/hub.md):
1. huggingface_hub's ``get_hf_file_metadata`` (HEAD on ``resolve``) gives the commit, the ETag (an LFS file's
   sha256), the size and the CDN location;
2. the free space is checked against what is still missing (``free_bytes``; the message says the shortfall);
3. huggingface_hub's ``http_get`` streams the bytes into ``.<name>.<etag>.part`` beside the final file, starting
   with an HTTP Range at the partial's size. (``hf_hub_download`` itself writes to a per-process temporary file
   and deletes it on failure since huggingface_hub 1.x, so it cannot resume across runs.) Each chunk is hashed as
   it is written; pause and cancel are checked between chunks;
4. the sha256 is compared with the hub's; a mismatch removes the partial and says so; a match renames the file
   into place and registers it in the model store with its sha256 and revision.

Rules of use: ``Downloader.run`` blocks (the window calls it on a worker lane, the CLI directly); ``pause`` and
``cancel`` may be called from any thread. Progress callbacks come from the running thread, at most every
``PROGRESS_EVERY`` seconds, plus one at the end of each part.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import shutil
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

from hisho.core import paths
from hisho.core.db import Database
from hisho.core.errors import UserError
from hisho.core.hub.catalog import QuantFile
from hisho.core.hub.errors import HubError, endpoint, hub_call, translate
from hisho.core.hub.token import get_token

log = logging.getLogger("hisho.hub")

COMPONENT = "downloads"
GIB, MIB = 1024**3, 1024**2
RESERVE = 64 * MIB           # left free after a download (the OS and the app need some room)
CHUNK = 256 * 1024           # bytes per write: pause and progress answer within one chunk
PROGRESS_EVERY = 0.1
WRITEBACK = 32 * MIB         # bytes between writeback hints
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHA1 = re.compile(r"^[0-9a-f]{40}$")
ACTIVE = ("queued", "running", "paused", "failed")


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


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= 100 * MIB else f"{n / MIB:.0f} MiB"


@dataclass
class Job:
    id: int
    repo: str
    name: str
    quant: str
    parts: list[str]
    sha256: list[str]
    part_sizes: list[int]
    size: int
    revision: str
    state: str
    done_bytes: int = 0
    error: str = ""
    model: str = ""
    created: float = 0.0
    updated: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def spec(self) -> str:
        return f"{self.repo}:{self.name}"


@dataclass
class Progress:
    job_id: int
    part: str
    done: int
    total: int
    speed: float          # bytes/s over the last few seconds
    eta_s: float | None
    state: str = "running"
    resumed_from: int = 0  # bytes that were already on disk when this run started


def _v1(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE downloads (
        id INTEGER PRIMARY KEY, repo TEXT NOT NULL, name TEXT NOT NULL, quant TEXT NOT NULL DEFAULT '',
        parts TEXT NOT NULL, sha256 TEXT NOT NULL, part_sizes TEXT NOT NULL, size INTEGER NOT NULL,
        revision TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, done_bytes INTEGER NOT NULL DEFAULT 0,
        error TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
        updated REAL NOT NULL)""")


def _job(row: dict[str, Any]) -> Job:
    d = dict(row)
    for k in ("parts", "sha256", "part_sizes"):
        d[k] = json.loads(d[k])
    return Job(**d)


def target_dir(repo: str) -> Path:
    from hisho.core.models import slug

    return paths.models_dir() / slug(repo.replace("/", "--"))


def partial_path(dest: Path, etag: str) -> Path:
    return dest.with_name(f".{dest.name}.{etag[:16]}.part")


class _Hasher:
    """sha256 on its own thread: hashlib releases the GIL, so hashing a chunk overlaps receiving the next one.
    Only the hash lags behind (at most ``depth`` chunks); the bytes are on disk as soon as ``write`` returns."""

    def __init__(self, start: Any, depth: int = 16) -> None:
        self.h = start
        self.q: queue.Queue[bytes | None] = queue.Queue(depth)
        self.t = threading.Thread(target=self._run, name="hisho-sha256", daemon=True)
        self.t.start()

    def _run(self) -> None:
        while (data := self.q.get()) is not None:
            self.h.update(data)

    def update(self, data: bytes) -> None:
        self.q.put(data)

    def close(self) -> Any:
        """Wait for the queued chunks; returns the hashlib object."""
        self.q.put(None)
        self.t.join()
        return self.h


class _Sink:
    """The file object http_get writes to: hashes each chunk, reports bytes, and stops between chunks."""

    def __init__(self, fh: BinaryIO, hasher: Any, stop: Callable[[], str | None],
                 on_bytes: Callable[[int], None]) -> None:
        self.fh, self.hasher, self.stop, self.on_bytes = fh, hasher, stop, on_bytes
        self.flushed = fh.tell()

    def write(self, data: bytes) -> int:
        reason = self.stop()
        if reason:
            raise Stopped(reason)
        n = self.fh.write(data)
        self.hasher.update(data)
        self.on_bytes(len(data))
        self._writeback()
        return n

    def _writeback(self) -> None:
        """Start writing finished stretches to disk now (Linux: FADV_DONTNEED starts writeback without waiting),
        so the final fsync has only the tail left to wait for instead of the whole file."""
        pos = self.fh.tell()
        if pos - self.flushed < WRITEBACK or not hasattr(os, "posix_fadvise"):
            return
        self.fh.flush()
        os.posix_fadvise(self.fh.fileno(), self.flushed, pos - self.flushed, os.POSIX_FADV_DONTNEED)
        self.flushed = pos

    def tell(self) -> int:
        return self.fh.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.fh.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        # http_get truncates when a server ignored the Range and sent the whole file again: hash from scratch
        n = self.fh.truncate(size)
        self.fh.flush()
        self.flushed = min(self.flushed, self.fh.tell())
        self.hasher.close()
        fresh = hashlib.sha256()
        _hash_file(Path(self.fh.name), fresh)
        self.hasher = _Hasher(fresh)
        return n


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


def _hash_file(path: Path, hasher: Any) -> None:
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK * 8):
            hasher.update(chunk)


def _git_oid(path: Path) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {path.stat().st_size}\0".encode())
    _hash_file(path, h)
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
        raise DiskFull(f"not enough free space for {Path(part).name}: it needs {_gib(missing)} more, "
                       f"{_gib(free)} is free on {dest.parent} ({_gib(missing + RESERVE - free)} short)")
    on_start(have, size)
    start = hashlib.sha256()
    if have:
        _hash_file(partial, start)
    same_host = urlsplit(location).netloc == urlsplit(url).netloc
    headers = build_hf_headers(token=token if same_host else False)  # the token never goes to the CDN
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK  # 10 MiB by default: pause and progress would lag 10 MiB behind
    _larger_reads()
    with partial.open("ab") as fh:
        sink = _Sink(fh, _Hasher(start), stop, on_bytes)
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
        fh.flush()
        os.fsync(fh.fileno())
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


class _Rate:
    """Bytes per second over the last few seconds."""

    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self.points: deque[tuple[float, int]] = deque()

    def add(self, t: float, done: int) -> float:
        self.points.append((t, done))
        while len(self.points) > 2 and t - self.points[0][0] > self.window:
            self.points.popleft()
        t0, d0 = self.points[0]
        return (done - d0) / (t - t0) if t > t0 else 0.0


@dataclass
class _Run:
    stop: str | None = None
    thread: int = field(default_factory=threading.get_ident)


class Downloader:
    """The download queue. One Downloader per process is enough; several share the database safely."""

    def __init__(self, db: Database | None = None, store: Any = None) -> None:
        self.db = db or Database()
        self.db.migrate(COMPONENT, [_v1])
        self._store = store
        self._runs: dict[int, _Run] = {}
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        if self._store is None:
            from hisho.core.models import ModelStore

            self._store = ModelStore(self.db)
        return self._store

    # ----- the queue -------------------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return [_job(cast(dict[str, Any], r)) for r in self.db.query("SELECT * FROM downloads ORDER BY id")]

    def get(self, job_id: int) -> Job:
        rows = self.db.query("SELECT * FROM downloads WHERE id = ?", [job_id])
        if not rows:
            raise UserError(f"no download #{job_id}")
        return _job(cast(dict[str, Any], rows[0]))

    def _set(self, job_id: int, **values: Any) -> None:
        values["updated"] = time.time()
        cols = ", ".join(f"{k} = ?" for k in values)
        self.db.execute(f"UPDATE downloads SET {cols} WHERE id = ?", [*values.values(), job_id])

    def enqueue(self, f: QuantFile) -> Job:
        """Queue ``f`` (or return its unfinished job: a second click continues the same download)."""
        for job in self.jobs():
            if job.repo == f.repo and job.name == f.name and job.state in ACTIVE:
                return job
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO downloads (repo, name, quant, parts, sha256, part_sizes, size, revision, state, created,"
            " updated) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [f.repo, f.name, f.quant, json.dumps(f.parts), json.dumps(f.sha256),
             json.dumps(f.part_sizes or [f.size]), f.size, f.revision, "queued", now, now])
        return self.get(int(cur.lastrowid or 0))

    def unfinished(self) -> list[Job]:
        """Downloads to offer at start-up, with the bytes already on disk. A job left 'running' by a process that
        died is 'paused' now."""
        with self._lock:
            running = set(self._runs)
        for job in self.jobs():
            if job.state == "running" and job.id not in running:
                self._set(job.id, state="paused", done_bytes=self.on_disk(job))
        return [j for j in self.jobs() if j.state in ACTIVE]

    def on_disk(self, job: Job) -> int:
        """Bytes of ``job`` already downloaded: finished parts and partial files."""
        folder, total = target_dir(job.repo), 0
        for part, size in zip(job.parts, job.part_sizes):
            name = Path(part).name
            if (folder / name).is_file() and (folder / name).stat().st_size == size:
                total += size
                continue
            total += sum(p.stat().st_size for p in folder.glob(f".{name}.*.part"))
        return total

    def forget(self, job_id: int) -> None:
        self.db.execute("DELETE FROM downloads WHERE id = ?", [job_id])

    # ----- control (any thread) --------------------------------------------------------------------------

    def pause(self, job_id: int) -> None:
        with self._lock:
            run = self._runs.get(job_id)
            if run is not None:
                run.stop = "pause"
                return
        job = self.get(job_id)
        if job.state in ("queued", "running"):
            self._set(job_id, state="paused")

    def cancel(self, job_id: int) -> None:
        """Stop and remove the partial files; the job is forgotten."""
        with self._lock:
            run = self._runs.get(job_id)
            if run is not None:
                run.stop = "cancel"
                return
        self._discard(self.get(job_id))

    def _discard(self, job: Job) -> None:
        folder = target_dir(job.repo)
        for part in job.parts:
            for p in folder.glob(f".{Path(part).name}.*.part"):
                p.unlink(missing_ok=True)
        self.forget(job.id)
        log.info("download %s cancelled; partial files removed", job.spec)

    def running(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._runs

    # ----- running (blocking) ----------------------------------------------------------------------------

    def run(self, job_id: int, progress: Callable[[Progress], None] | None = None) -> Any:
        """Download every part of the job, verify, register; returns the ModelEntry. Raises ``Stopped`` when
        paused or cancelled, a UserError (one line) on failure; the job's row says the same."""
        job = self.get(job_id)
        with self._lock:
            if job_id in self._runs:
                raise UserError(f"{job.spec} is already downloading")
            run = self._runs[job_id] = _Run()
        self._set(job_id, state="running", error="")
        try:
            entry = self._run_parts(job, run, progress)
        except Stopped as stop:
            if stop.reason == "cancel":
                self._discard(job)
            else:
                self._set(job_id, state="paused", done_bytes=self.on_disk(job))
            raise
        except KeyboardInterrupt:
            self._set(job_id, state="paused", done_bytes=self.on_disk(job))
            raise
        except UserError as exc:
            self._set(job_id, state="failed", error=str(exc), done_bytes=self.on_disk(job))
            raise
        except Exception as exc:
            self._set(job_id, state="failed", error=f"{type(exc).__name__}: {exc}", done_bytes=self.on_disk(job))
            raise
        finally:
            with self._lock:
                self._runs.pop(job_id, None)
        self._set(job_id, state="done", done_bytes=job.size, model=entry.name)
        return entry

    def _run_parts(self, job: Job, run: _Run, progress: Callable[[Progress], None] | None) -> Any:
        folder = target_dir(job.repo)
        rate = _Rate()
        last = [0.0]
        shas: list[str] = []
        revision = job.revision
        for i, part in enumerate(job.parts):
            dest = folder / Path(part).name
            before = sum(job.part_sizes[:i])
            state = {"done": before, "resumed": 0}
            if dest.is_file() and dest.stat().st_size == job.part_sizes[i] and job.sha256[i]:
                shas.append(job.sha256[i])  # verified when it finished; a paused split resumes at the next part
                continue

            def report(final: bool = False, part: str = part, state: dict[str, int] = state) -> None:
                now = time.monotonic()
                if progress is None or (not final and now - last[0] < PROGRESS_EVERY):
                    return
                last[0] = now
                speed = rate.add(now, state["done"])
                left = job.size - state["done"]
                progress(Progress(job.id, part, state["done"], job.size, speed,
                                  left / speed if speed > 0 else None, resumed_from=state["resumed"]))

            def on_start(have: int, size: int, state: dict[str, int] = state) -> None:
                state["done"] += have
                state["resumed"] = have
                report(True)

            def on_bytes(n: int, state: dict[str, int] = state) -> None:
                state["done"] += n
                report()

            sha, commit = fetch_part(job.repo, part, revision, dest, expected_sha=job.sha256[i],
                                     stop=lambda: run.stop, on_bytes=on_bytes, on_start=on_start)
            revision = revision or commit
            shas.append(sha)
            self._set(job.id, done_bytes=state["done"], revision=revision)
            report(True)
        return self._register(job, folder, shas, revision)

    def _register(self, job: Job, folder: Path, shas: list[str], revision: str) -> Any:
        from hisho.core.models import slug

        first = folder / Path(job.parts[0]).name
        stem = re.sub(r"-00001-of-\d{5}$", "", first.stem)
        store = self.store
        name = slug(stem)
        existing = store.get(name)
        if existing is not None and Path(existing.path).resolve() != first.resolve():
            name = slug(f"{job.repo.split('/')[0]}-{stem}")
        parts = [str(folder / Path(p).name) for p in job.parts] if len(job.parts) > 1 else None
        entry = store.add(first, name=name, source=f"hub:{job.repo}", sha256=",".join(shas), revision=revision,
                          parts=parts, owned=True)
        log.info("downloaded %s as %s (revision %s)", job.spec, entry.name, revision[:12])
        return entry


def resolve_spec(spec: str) -> tuple[str, str]:
    repo, _, filename = spec.partition(":")
    if not repo or repo.count("/") != 1:
        raise UserError(f"expected REPO[:FILE] like 'org/name:model.Q4_K_M.gguf', got {spec!r}")
    return repo, filename


def pick(files: list[QuantFile], repo: str, filename: str) -> QuantFile | None:
    """The QuantFile a ``FILE`` names (a part's path, its base name or its quant); None when ``FILE`` is empty."""
    if not files:
        raise UserError(f"{repo} has no GGUF files")
    if not filename:
        return files[0] if len(files) == 1 else None
    for f in files:
        if filename in f.parts or filename in (Path(p).name for p in f.parts):
            return f
    quants = [f for f in files if f.quant.lower() == filename.lower()]
    if len(quants) == 1:
        return quants[0]
    listing = ", ".join(f.name for f in files[:12])
    raise UserError(f"{repo} has no GGUF file {filename!r} (it has: {listing})")


def pull(spec: str, *, store: Any = None, progress: Callable[[Progress], None] | None = None,
         choose: Callable[[list[QuantFile]], QuantFile] | None = None) -> Any:
    """``REPO[:FILE]`` -> a downloaded, verified, registered ModelEntry. Without FILE and with several files,
    ``choose`` picks (the CLI picks the planner's recommendation)."""
    from hisho.core.hub.catalog import repo_files

    repo, filename = resolve_spec(spec)
    files = repo_files(repo)
    f = pick(files, repo, filename)
    if f is None:
        if choose is None:
            listing = ", ".join(q.name for q in files[:12])
            raise UserError(f"{repo} has {len(files)} GGUF models ({listing}); name one as {repo}:FILE")
        f = choose(files)
    dl = Downloader(store.db if store is not None else None, store)
    job = dl.enqueue(f)
    return dl.run(job.id, progress)
