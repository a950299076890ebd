"""The person's say over each tool call: allow once, always for this tool, or deny. No Qt.

Rules of use: the tool loop asks ``Approve`` (the window shows a question; a headless run passes
``allow_all``) for every call of a tool not in ``Approvals``; "always" adds the tool there. ``Approvals`` is
remembered with the settings (``tools_always_allowed``: ``server/tool`` keys) through ``on_change``, and
``revoke`` takes a tool out again. Any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

ONCE, ALWAYS, DENY = "once", "always", "deny"


@dataclass(frozen=True)
class CallRequest:
    """What the person is asked about: which tool of which server, with which arguments, in which chat."""

    name: str                   # as the model called it
    server: str
    tool: str                   # the server's own name
    arguments: dict[str, Any]
    conversation_id: int

    @property
    def key(self) -> str:
        return f"{self.server}/{self.tool}"


class Approve(Protocol):
    def __call__(self, request: CallRequest) -> str: ...   # ONCE, ALWAYS or DENY


def allow_all(request: CallRequest) -> str:
    """Every call allowed (a headless run the person started for this, like ``hisho bench tools``)."""
    return ONCE


class Approvals:
    """Tools the person allowed always (``server/tool`` keys)."""

    def __init__(self, keys: Iterable[str] = (), on_change: Callable[[list[str]], None] | None = None) -> None:
        self._keys = set(keys)
        self._lock = threading.Lock()
        self.on_change = on_change

    def allowed(self, key: str) -> bool:
        with self._lock:
            return key in self._keys

    def always(self, key: str) -> None:
        self._change(lambda keys: keys.add(key))

    def revoke(self, key: str) -> None:
        self._change(lambda keys: keys.discard(key))

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._keys)

    def _change(self, fn: Callable[[set[str]], None]) -> None:
        with self._lock:
            fn(self._keys)
            keys = sorted(self._keys)
        if self.on_change is not None:
            self.on_change(keys)
