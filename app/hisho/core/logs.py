"""Logging set-up: named loggers per area, a rotating file in the log dir, stderr for the CLI."""

from __future__ import annotations

import logging
import logging.handlers

from hisho.core import paths

AREAS = ("hisho.engine", "hisho.kv", "hisho.planner", "hisho.gui", "hisho.store", "hisho.docs", "hisho.cli")
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
        file_handler = logging.handlers.RotatingFileHandler(
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
