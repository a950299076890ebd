"""The window's background actions as ops (Anki's ``aqt/operations``): a screen says what its work touches, the
op picks the thread.

Before this, each screen called ``executor.submit("store" | "engine" | "remote" | ...)`` itself and chose a lane
every time; a wrong choice (a network probe on the ``engine`` lane, a database write off ``store``) held up
replies or broke the database's one-writer rule, and nothing caught it. Now the lane is chosen here only, by
what the work touches, and ``tests/core/test_architecture.py`` fails on a GUI module outside this one that calls
``submit``.

Rules of use (GUI thread):
- Build an op by what its work touches, chain what follows, then ``run()``:
      ops.database(ctx.executor, lambda: store.search(text)).success(show).failure(say).run()
  ``database``: the SQLite database (conversations, the KV index, the model registry, the download queue, the
  hub token, settings); ``engine``: the engine (loads, token counts, replies, summaries, attaching documents,
  plans that read the loaded model); ``remote``: a remote engine over the network (probes, its model list);
  ``hub``: the Hugging Face hub (search, file lists, header reads, cards); ``download``: a model download;
  ``kv_files``: KV files the engine writes in the background (waiting for them, "Clear all"); ``tool_servers``:
  MCP servers (a Test, a restart); ``measurement``:
  this machine's speed, in a probe child.
  Named ops cover the frequent ones: ``save_settings(ex, settings)``.
- ``success(fn)``: ``fn(result)`` on the GUI thread. ``failure(fn)``: ``fn(exc)`` on the GUI thread. Without a
  failure handler the app's report says it (``Executor.on_error``: the controller's toast), or it is logged.
  ``quiet(what)``: a failure the screen can do without (a badge, a model card, a listing on a page that shows
  its own state): logged at info as "``what``: <error>", never shown.
- ``latest(key)``: a newer op with the same key replaces one of this kind still waiting (a picker re-opened).
- A new kind of work (a new lane) is added here, with its word; a screen never names a lane.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, Protocol, TypeVar

from hisho.core.executor import Executor

log = logging.getLogger("hisho.gui")

T = TypeVar("T")


class Op(Generic[T]):
    """One background action: ``fn`` runs on its lane, then ``success`` or ``failure`` on the GUI thread."""

    def __init__(self, executor: Executor, lane: str, fn: Callable[[], T]) -> None:
        self._executor = executor
        self._lane = lane
        self._fn = fn
        self._success: Callable[[T], Any] | None = None
        self._failure: Callable[[BaseException], Any] | None = None
        self._key: str | None = None

    @property
    def lane(self) -> str:
        """The lane it runs on (for tests and logs; screens never choose it)."""
        return self._lane

    def success(self, fn: Callable[[T], Any] | None) -> Op[T]:
        """``fn(result)`` on the GUI thread (None: nothing follows)."""
        self._success = fn
        return self

    def failure(self, fn: Callable[[BaseException], Any] | None) -> Op[T]:
        """``fn(exc)`` on the GUI thread (None: the app's report says it)."""
        self._failure = fn
        return self

    def quiet(self, what: str) -> Op[T]:
        """A failure the screen can do without: logged at info, never shown."""
        def logged(exc: BaseException) -> None:
            log.info("%s: %s", what, exc)

        self._failure = logged
        return self

    def latest(self, key: str) -> Op[T]:
        """Latest wins: a newer op with this ``key`` replaces this one while it still waits."""
        self._key = key
        return self

    def run(self) -> Future[T]:
        """Start it (GUI thread); the Future is ``fn``'s result, cancelled when the app closes first."""
        return self._executor.submit(self._lane, self._fn, done=self._success, failed=self._failure, key=self._key)


# ----- by what the work touches ------------------------------------------------------------------------------

def database(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Reads and writes of the app's SQLite database: its one writer, the ``store`` lane."""
    return Op(executor, "store", fn)


def engine(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Work that talks to the engine: the ``engine`` lane, one job at a time (the engine runs one anyway)."""
    return Op(executor, "engine", fn)


def remote(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Network waits on a remote engine (a probe, its model list): the ``remote`` lane, never the engine's."""
    return Op(executor, "remote", fn)


def hub(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Requests to the Hugging Face hub: the ``hub`` lane."""
    return Op(executor, "hub", fn)


def download(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """A model download: the ``download`` lane, one at a time."""
    return Op(executor, "download", fn)


def tool_servers(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Waits on MCP servers (a Test that starts one apart, stopping the running ones before a restart): the
    ``remote`` lane's network and child-process waits, never the engine's queue, where a reply's calls run."""
    return Op(executor, "remote", fn)


def measurement(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Measuring this machine in a probe child (seconds of both cores): the ``measure`` lane, beside the engine's
    work, never in its queue; the app's close ends the child (``spawn.stop_running``)."""
    return Op(executor, "measure", fn)


def kv_files(executor: Executor, fn: Callable[[], T]) -> Op[T]:
    """Waiting for KV files the engine writes in the background: the ``kv`` lane, so no other lane blocks on a
    disk."""
    return Op(executor, "kv", fn)


# ----- named ops -----------------------------------------------------------------------------------------------

class Saves(Protocol):
    """Settings, or any set of values kept in the database (``save()`` writes them)."""

    def save(self) -> Any: ...


def save_settings(executor: Executor, settings: Saves) -> Op[Any]:
    """Write ``settings`` to the database (their values are already changed in memory)."""
    return database(executor, settings.save)
