"""The download queue (docs/hub.md): kept in SQLite (component ``downloads``) so that a download paused, cut
off or interrupted by quitting resumes where it stopped, also after a restart. The bytes themselves move in
``hisho.core.hub.fetch``; the window runs a download in a process of its own (``hisho.core.hub.child``).

Each part of a job is fetched into a resumable partial and verified against the hub's sha256 (``fetch_part``);
when every part is in place the model is registered in the model store with its sha256 and revision.

Rules of use: ``Downloader.run`` blocks (the window calls it through ``child.run_child`` on a worker lane, the CLI
directly); ``pause`` and ``cancel`` may be called from any thread. Progress callbacks come from the running
thread, at most every ``PROGRESS_EVERY`` seconds, plus one at the end of each part.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hisho.core import paths
from hisho.core.db import Database
from hisho.core.errors import UserError
from hisho.core.hub import partial as partial_mod
from hisho.core.hub import projector
from hisho.core.hub.catalog import QuantFile
from hisho.core.hub.fetch import DiskFull, HashMismatch, Stopped, fetch_part
from hisho.core.models.store import ModelStore, slug

if TYPE_CHECKING:
    import sqlite_utils  # a step's argument; hisho.core.db imports it only when a step or upsert runs

log = logging.getLogger("hisho.hub")

__all__ = ["DiskFull", "Downloader", "HashMismatch", "Job", "Progress", "Stopped", "pick", "pull", "resolve_spec",
           "target_dir"]

COMPONENT = "downloads"
PROGRESS_EVERY = 0.1
ACTIVE = ("queued", "running", "paused", "failed")


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
    mmproj: str = ""  # the vision projector's path in the repo: then the last of ``parts`` (docs/hub.md)

    @property
    def model_parts(self) -> list[str]:
        return self.parts[:-1] if self.mmproj else self.parts

    def saved_name(self, i: int) -> str:
        """The file name part ``i`` is saved under: the projector as ``<model stem>.mmproj.gguf``."""
        if self.mmproj and i == len(self.parts) - 1:
            return projector.saved_name(self.parts[0])
        return Path(self.parts[i]).name

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


def _v1(db: sqlite_utils.Database) -> None:
    columns = {"id": int, "repo": str, "name": str, "quant": str, "parts": str, "sha256": str, "part_sizes": str,
               "size": int, "revision": str, "state": str, "done_bytes": int, "error": str, "model": str,
               "created": float, "updated": float}
    db.table("downloads").create(columns, pk="id", not_null=set(columns) - {"id"},
                           defaults={"quant": "", "revision": "", "done_bytes": 0, "error": "", "model": ""})


def _v2(db: sqlite_utils.Database) -> None:
    db.table("downloads").add_column("mmproj", str, not_null_default="")


def _job(row: dict[str, Any]) -> Job:
    d = dict(row)
    for k in ("parts", "sha256", "part_sizes"):
        d[k] = json.loads(d[k])
    return Job(**d)


def target_dir(repo: str) -> Path:
    return paths.models_dir() / slug(repo.replace("/", "--"))


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
    notify: Callable[[str], None] | None = None  # passes pause/cancel on to a download running elsewhere


class Downloader:
    """The download queue, over the model registry ``store`` it registers finished files in (and whose database
    connection it shares). The composition root makes the one a process uses (``services.open_downloads``)."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self.db: Database = store.db
        self.db.migrate(COMPONENT, [_v1, _v2])
        self._runs: dict[int, _Run] = {}
        self._lock = threading.Lock()

    # ----- the queue -------------------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return [_job(r) for r in self.db.query("SELECT * FROM downloads ORDER BY id")]

    def get(self, job_id: int) -> Job:
        rows = self.db.query("SELECT * FROM downloads WHERE id = ?", [job_id])
        if not rows:
            raise UserError(f"no download #{job_id}")
        return _job(rows[0])

    def _set(self, job_id: int, **values: Any) -> None:
        values["updated"] = time.time()
        cols = ", ".join(f"{k} = ?" for k in values)
        self.db.execute(f"UPDATE downloads SET {cols} WHERE id = ?", [*values.values(), job_id])

    def enqueue(self, f: QuantFile, *, with_projector: bool = True) -> Job:
        """Queue ``f`` with its vision projector where it has one (or return its unfinished job: a second click
        continues the same download). The projector is one more part of the same job: one download, one
        progress, verified like the model's parts."""
        mmproj = f.mmproj if with_projector else ""
        for job in self.jobs():
            if job.repo == f.repo and job.name == f.name and job.state in ACTIVE:
                if job.mmproj == mmproj or self.running(job.id):
                    return job
                self.forget(job.id)  # asked again with(out) the projector: the model's partials carry over
        now = time.time()
        parts, shas, sizes = list(f.parts), list(f.sha256), list(f.part_sizes or [f.size])
        if mmproj:
            parts.append(mmproj)
            shas.append(f.mmproj_sha256)
            sizes.append(f.mmproj_size)
        cur = self.db.execute(
            "INSERT INTO downloads (repo, name, quant, parts, sha256, part_sizes, size, revision, state, created,"
            " updated, mmproj) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [f.repo, f.name, f.quant, json.dumps(parts), json.dumps(shas), json.dumps(sizes), sum(sizes),
             f.revision, "queued", now, now, mmproj])
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
        for i, size in enumerate(job.part_sizes):
            name = job.saved_name(i)
            if (folder / name).is_file() and (folder / name).stat().st_size == size:
                total += size
                continue
            total += sum(p.stat().st_size for p in folder.glob(f".{name}.*.part"))
        return total

    def forget(self, job_id: int) -> None:
        self.db.execute("DELETE FROM downloads WHERE id = ?", [job_id])

    # ----- control (any thread) --------------------------------------------------------------------------

    def _signal(self, job_id: int, word: str) -> bool:
        with self._lock:
            run = self._runs.get(job_id)
            if run is None:
                return False
            run.stop = word
        if run.notify is not None:
            run.notify(word)
        return True

    @contextmanager
    def claim(self, job_id: int, notify: Callable[[str], None] | None = None) -> Iterator[_Run]:
        """Mark ``job_id`` as running in this process for the duration (one run of a job at a time)."""
        with self._lock:
            if job_id in self._runs:
                raise UserError(f"{self.get(job_id).spec} is already downloading")
            run = self._runs[job_id] = _Run(notify=notify)
        try:
            yield run
        finally:
            with self._lock:
                self._runs.pop(job_id, None)

    def pause(self, job_id: int) -> None:
        if self._signal(job_id, "pause"):
            return
        job = self.get(job_id)
        if job.state in ("queued", "running"):
            self._set(job_id, state="paused")

    def cancel(self, job_id: int) -> None:
        """Stop and remove the partial files; the job is forgotten."""
        if self._signal(job_id, "cancel"):
            return
        self._discard(self.get(job_id))

    def _discard(self, job: Job) -> None:
        folder = target_dir(job.repo)
        for i in range(len(job.parts)):
            for p in folder.glob(f".{job.saved_name(i)}.*.part"):
                partial_mod.remove(p)  # and its ledger
        self.forget(job.id)
        log.info("download %s cancelled; partial files removed", job.spec)

    def running(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._runs

    # ----- running (blocking) ----------------------------------------------------------------------------

    def run(self, job_id: int, progress: Callable[[Progress], None] | None = None,
            stop: Callable[[], str | None] = lambda: None) -> Any:
        """Download every part of the job, verify, register; returns the ModelEntry. Raises ``Stopped`` when
        paused or cancelled (``pause``/``cancel``, or ``stop`` returning the reason), a UserError (one line) on
        failure; the job's row says the same."""
        job = self.get(job_id)
        with self.claim(job_id) as run:
            return self._run_claimed(job, run, progress, stop)

    def _run_claimed(self, job: Job, run: _Run, progress: Callable[[Progress], None] | None,
                     stop: Callable[[], str | None]) -> Any:
        job_id = job.id
        self._set(job_id, state="running", error="")
        try:
            entry = self._run_parts(job, lambda: run.stop or stop(), progress)
        except Stopped as halt:
            if halt.reason == "cancel":
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
        self._set(job_id, state="done", done_bytes=job.size, model=entry.name)
        return entry

    def _run_parts(self, job: Job, stop: Callable[[], str | None],
                   progress: Callable[[Progress], None] | None) -> Any:
        folder = target_dir(job.repo)
        rate = _Rate()
        last = [0.0]
        shas: list[str] = []
        revision = job.revision
        if job.mmproj and not (folder / job.saved_name(len(job.parts) - 1)).is_file():
            projector.check(job.repo, job.parts[0], job.mmproj, revision)  # refused before any byte moves
        for i, part in enumerate(job.parts):
            dest = folder / job.saved_name(i)
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
                                     stop=stop, on_bytes=on_bytes, on_start=on_start)
            revision = revision or commit
            shas.append(sha)
            self._set(job.id, done_bytes=state["done"], revision=revision)
            report(True)
        return self._register(job, folder, shas, revision)

    def _register(self, job: Job, folder: Path, shas: list[str], revision: str) -> Any:
        first = folder / Path(job.parts[0]).name
        stem = re.sub(r"-00001-of-\d{5}$", "", first.stem)
        model_parts = job.model_parts
        shas = shas[:len(model_parts)]
        store = self.store
        name = slug(stem)
        existing = store.get(name)
        if existing is not None and Path(existing.path).resolve() != first.resolve():
            name = slug(f"{job.repo.split('/')[0]}-{stem}")
        parts = [str(folder / Path(p).name) for p in model_parts] if len(model_parts) > 1 else None
        entry = store.add(first, name=name, source=f"hub:{job.repo}", sha256=",".join(shas), revision=revision,
                          parts=parts, owned=True)
        log.info("downloaded %s as %s (revision %s)%s", job.spec, entry.name, revision[:12],
                 " with its vision projector" if job.mmproj else "")
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


def pull(spec: str, dl: Downloader, *, progress: Callable[[Progress], None] | None = None,
         choose: Callable[[list[QuantFile]], QuantFile] | None = None, with_projector: bool = True) -> Any:
    """``REPO[:FILE]`` -> a downloaded, verified, registered ModelEntry (with its vision projector beside it
    where the repository has one, unless ``with_projector`` is False). Without FILE and with several files,
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
    job = dl.enqueue(f, with_projector=with_projector)
    return dl.run(job.id, progress)
