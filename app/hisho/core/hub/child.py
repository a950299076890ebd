"""A download in a process of its own, for the window (docs/hub.md, "Downloads from the window").

Moving a few hundred MB/s through huggingface_hub's httpx is Python work on every chunk; on a worker thread of
the window it competes with the GUI thread for the GIL and the window stutters (the ``gui_stall_ms`` figure). So
the window's download lane starts this module as a child (``hisho.core.spawn`` role ``download``, so a bundle
starts it too), which runs ``Downloader.run`` and writes one JSON line per progress report and one for the
outcome on stdout; the lane thread only waits on that pipe. ``pause``/``cancel`` on the parent's Downloader are passed on as a line on the child's stdin; if the parent
goes away (stdin closes) the child pauses, so the next start offers to continue. The job's row in the database is
kept by the child, exactly as for ``hisho models pull``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from hisho.core import spawn
from hisho.core.errors import UserError
from hisho.core.hub.download import Downloader, Progress
from hisho.core.hub.errors import GatedRepo, HubError, HubOffline, NotFound
from hisho.core.hub.fetch import DiskFull, HashMismatch, Stopped

log = logging.getLogger("hisho.hub")

KINDS: dict[str, type[UserError]] = {c.__name__: c for c in (DiskFull, HashMismatch, HubError, HubOffline, NotFound,
                                                              GatedRepo)}


def _drain(stream: IO[str], tail: deque[str]) -> None:
    for line in stream:
        tail.append(line.rstrip())
        log.debug("download process: %s", line.rstrip())


def run_child(dl: Downloader, job_id: int, progress: Callable[[Progress], None] | None = None) -> Any:
    """``dl.run(job_id, progress)`` in a child process: the same outcome (the ModelEntry, ``Stopped``, or the same
    one-line UserError) and the same progress reports; ``dl.pause``/``dl.cancel`` reach it."""
    proc = subprocess.Popen(spawn.command("download", str(job_id)), env=spawn.child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin
    tail: deque[str] = deque(maxlen=5)
    drain = threading.Thread(target=_drain, args=(proc.stderr, tail), name="hisho-download-stderr", daemon=True)
    drain.start()

    def tell(word: str) -> None:
        try:
            stdin.write(word + "\n")
            stdin.flush()
        except (OSError, ValueError):  # the child has already finished
            pass

    outcome: dict[str, Any] = {}
    try:
        with dl.claim(job_id, notify=tell):
            for line in proc.stdout:
                msg = json.loads(line)
                if "progress" in msg:
                    if progress is not None:
                        progress(Progress(**msg["progress"]))
                else:
                    outcome = msg
    finally:
        rc = proc.wait()
        drain.join(5)
        stdin.close()
    if "done" in outcome:
        entry = dl.store.get(outcome["done"])
        if entry is None:
            raise HubError(f"the download finished but {outcome['done']} is not in the model list")
        return entry
    if "stopped" in outcome:
        raise Stopped(outcome["stopped"])
    if "error" in outcome:
        kind = KINDS.get(outcome.get("type", ""), UserError if outcome.get("user") else None)
        if kind is None:
            raise RuntimeError(outcome["error"])
        raise kind(outcome["error"])
    dl.unfinished()  # the child died without a word: its job is 'running' in the database; that makes it paused
    why = tail[-1] if tail else f"exit status {rc}"
    raise HubError(f"the download process stopped unexpectedly ({why}); press Resume to continue")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    job_id = int(argv[0])
    from hisho.core.models.store import ModelStore

    dl = Downloader(ModelStore())   # this child process's own root: one registry, one queue, one connection
    word: list[str | None] = [None]

    def emit(msg: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    def control() -> None:
        for line in sys.stdin:
            if line.strip() in ("pause", "cancel"):
                word[0] = line.strip()
        word[0] = word[0] or "pause"  # the window went away: pause, the next start offers to continue

    threading.Thread(target=control, name="hisho-download-control", daemon=True).start()
    try:
        entry = dl.run(job_id, lambda p: emit({"progress": asdict(p)}), stop=lambda: word[0])
    except Stopped as stop:
        emit({"stopped": stop.reason})
        return 0
    except KeyboardInterrupt:  # Ctrl+C in the terminal the window was started from: paused, as in the CLI
        emit({"stopped": "pause"})
        return 130
    except UserError as exc:
        emit({"error": str(exc), "type": type(exc).__name__, "user": True})
        return 1
    except Exception as exc:
        log.exception("download #%d failed", job_id)
        emit({"error": f"{type(exc).__name__}: {exc}", "type": type(exc).__name__, "user": False})
        return 1
    emit({"done": entry.name})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
