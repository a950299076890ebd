"""Logging set-up: named loggers per area, a rotating file in the log dir, stderr for the CLI."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from hisho.core import paths

AREAS = ("hisho.engine", "hisho.kv", "hisho.planner", "hisho.gui", "hisho.store", "hisho.docs", "hisho.cli.main")
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_configured: set[str] = set()


class _NoTraceback(logging.Formatter):
    """stderr gets one line per record; tracebacks go to the log file only."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = saved


class _QuietFileHandler(logging.handlers.RotatingFileHandler):
    """The log file; when it cannot be written (a full disk) it says so once on stderr, in one line, and drops
    the records it cannot write (each is still tried: they land again once there is space), instead of logging's "--- Logging error ---" traceback per record."""

    failing = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if not self.failing:
            self.failing = True
            exc = sys.exc_info()[1]
            try:
                sys.stderr.write(f"hisho: the log file {self.baseFilename} cannot be written ({exc}); "
                                 "log records are dropped until it can\n")
            except (OSError, ValueError):
                pass


def setup(*, stderr_level: int | None = None, file_level: int = logging.INFO) -> None:
    """Install the file handler (once per log file) and, if asked, a stderr handler.

    Safe to call more than once; a changed ``HISHO_HOME`` gets its own file handler.
    """
    root = logging.getLogger("hisho")
    root.setLevel(logging.DEBUG)
    target = str(paths.log_file())
    if target not in _configured:
        for handler in list(root.handlers):
            if isinstance(handler, logging.handlers.RotatingFileHandler):
                root.removeHandler(handler)
                handler.close()
        file_handler = _QuietFileHandler(
            target, maxBytes=2 * 1024 * 1024, backupCount=3, encoding="utf-8"
        )
        file_handler.setLevel(file_level)
        file_handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(file_handler)
        _configured.clear()
        _configured.add(target)
    if stderr_level is not None and not any(getattr(h, "_hisho_stderr", False) for h in root.handlers):
        stream = logging.StreamHandler()
        stream.setLevel(stderr_level)
        stream.setFormatter(_NoTraceback("%(levelname)s %(name)s: %(message)s"))
        stream._hisho_stderr = True  # type: ignore[attr-defined]
        root.addHandler(stream)


def rotate(path: Path, limit: int = 8 * 1024 * 1024) -> None:
    """Keep one previous log file (the engine's: llama.cpp logs every load at length)."""
    try:
        if path.stat().st_size > limit:
            os.replace(path, path.with_suffix(path.suffix + ".1"))
    except OSError:
        pass


_TELLING = ("GGML_ASSERT", "error", "Error", "abort", "failed", "Traceback")


def telling_tail(path: Path) -> str:
    """The most telling of a log's last lines (the engine's, after a crash): an assert or error line if there
    is one, else the last line."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines[-40:]):
        if any(word in line for word in _TELLING):
            return line[:300]
    return lines[-1][:300] if lines else ""


def has_stderr() -> bool:
    """Whether ``setup`` installed the stderr handler (the CLI's): then a log record already reaches the user."""
    return any(getattr(h, "_hisho_stderr", False) for h in logging.getLogger("hisho").handlers)


def close_file() -> None:
    """Detach and close the log file (before its folder is deleted); later records go nowhere but stderr."""
    root = logging.getLogger("hisho")
    for handler in list(root.handlers):
        if isinstance(handler, logging.handlers.RotatingFileHandler):
            root.removeHandler(handler)
            handler.close()
    _configured.clear()
