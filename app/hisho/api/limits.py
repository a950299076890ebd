"""What one API request may cost: its body's size, its prompt's length, its reply's length, its time, and how
many requests one key may have waiting. No I/O, no Qt.

Rules of use:
- ``Limits.from_settings(settings)``; the settings are declared in ``hisho.core.settings`` (``api_*``) and
  docs/api.md lists each limit, its default and its error.
- ``check(job, n_ctx_seq)`` before a request goes to the engine: a prompt of more characters than
  ``CHARS_PER_TOKEN`` per allowed token is refused without tokenizing it (tokens are then counted by the
  engine, which refuses past ``prompt_tokens``); ``max_tokens`` larger than a sequence's context is refused.
- ``Admission`` counts each key's requests from the moment they are sent to the engine until the engine has
  ended them; ``enter`` raises a 429 with ``Retry-After`` when a key already has every sequence busy and
  ``max_queued`` more waiting. Thread-safe (``leave`` runs on a reply's reader thread).
- ``max_wait_s``: how long a request may wait while the engine works on something sent before it (a summary, a
  model load); ``hisho.api.waits`` holds that wait to it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from hisho.api.shapes import ApiError, Job

# No tokenizer the app loads makes tokens longer than this on average over a whole prompt (English prose is ~4
# characters a token, code ~3; only long runs of one repeated character come near it), so a prompt with more
# characters than this per allowed token cannot fit and is refused before any of it is tokenized.
CHARS_PER_TOKEN = 8


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 8 * 1024 * 1024
    max_prompt_tokens: int = 0          # 0: what one sequence's context holds
    request_timeout_s: float = 600.0
    max_queued: int = 16
    max_wait_s: float = 30.0            # behind the engine's other work (hisho.api.waits)

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        return cls(max_body_bytes=int(settings["api_max_body_mb"]) * 1024 * 1024,
                   max_prompt_tokens=int(settings["api_max_prompt_tokens"]),
                   request_timeout_s=float(settings["api_request_timeout_s"]),
                   max_queued=int(settings["api_max_queued"]),
                   max_wait_s=float(settings["api_max_wait_s"]))

    def prompt_tokens(self, n_ctx_seq: int) -> int:
        """The longest prompt in tokens: the setting, never more than the context leaves for one reply token."""
        if n_ctx_seq <= 0:  # an engine that does not say (a remote one before its first load)
            return self.max_prompt_tokens
        room = n_ctx_seq - 1
        return min(self.max_prompt_tokens, room) if self.max_prompt_tokens else room

    def check(self, job: Job, n_ctx_seq: int) -> None:
        """Refuse what can never be answered, before the engine sees it (``ApiError``)."""
        tokens = self.prompt_tokens(n_ctx_seq)
        chars = job.prompt_chars()
        if tokens and chars > CHARS_PER_TOKEN * tokens:
            raise ApiError(400, f"the prompt has {chars} characters; this server takes prompts of at most {tokens} "
                                f"tokens ({CHARS_PER_TOKEN * tokens} characters). Shorten the prompt.",
                           param=job.prompt_param, code="context_length_exceeded")
        if job.max_tokens_given and n_ctx_seq > 0 and job.sampling.max_tokens >= n_ctx_seq:
            raise ApiError(400, f"'{job.max_tokens_param}' is too large: {job.sampling.max_tokens}. This server's "
                                f"context holds {n_ctx_seq} tokens, prompt and reply together.",
                           param=job.max_tokens_param, code="invalid_value")


class Admission:
    """Requests in flight per key (see the module docstring)."""

    def __init__(self, max_queued: int) -> None:
        self.max_queued = max_queued
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._mean_s = 5.0  # a running mean of how long a request holds its place (for Retry-After)

    def in_flight(self, key: str) -> int:
        with self._lock:
            return self._in_flight.get(key, 0)

    def enter(self, key: str, slots: int) -> float:
        """Take a place for ``key`` or raise 429. Returns the time it was taken (for ``leave``)."""
        with self._lock:
            n = self._in_flight.get(key, 0)
            if n >= max(1, slots) + self.max_queued:
                wait = max(1, min(60, math.ceil(self._mean_s * (n - slots + 1) / max(1, slots))))
                raise ApiError(429, f"too many requests: {n} are running or waiting for this key (at most "
                                    f"{slots} run at once and {self.max_queued} wait); retry in {wait} s",
                               type_="rate_limit_error", code="rate_limit_exceeded",
                               headers={"Retry-After": str(wait)})
            self._in_flight[key] = n + 1
        return time.monotonic()

    def leave(self, key: str, since: float) -> None:
        with self._lock:
            n = self._in_flight.get(key, 0) - 1
            if n > 0:
                self._in_flight[key] = n
            else:
                self._in_flight.pop(key, None)
            self._mean_s = 0.8 * self._mean_s + 0.2 * (time.monotonic() - since)
