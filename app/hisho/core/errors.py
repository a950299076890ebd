"""Errors split the qutebrowser way: ``UserError`` is for the person (clear one-line message, exit 2), anything
else is a bug (exit 1, logged with its traceback)."""

from __future__ import annotations

from enum import Enum


class ErrorKind(str, Enum):
    """What an "error" event says went wrong (the one list; ``EngineError.kind`` is one of these)."""

    BAD_REQUEST = "bad_request"    # malformed request, unknown op: a bug in the caller
    PROTOCOL = "protocol"          # client and engine speak different protocol versions (a broken install)
    MODEL_LOAD = "model_load"      # the model file could not be loaded: the user's to fix
    NOT_LOADED = "not_loaded"      # generate/tokenize before load
    CONTEXT_FULL = "context_full"  # prompt (+ reply) does not fit n_ctx
    STATE = "state"                # a KV state could not be saved or restored
    CRASHED = "crashed"            # the engine process died (set by the client, never sent by the engine)
    CLOSED = "closed"              # the engine was closed with the request in flight (client side, like CRASHED)
    REMOTE = "remote"              # a remote engine (OpenAI-compatible server) failed; the message says how
    INTERNAL = "internal"          # anything else (a bug); the message says what

    @classmethod
    def of(cls, value: object) -> ErrorKind:
        """The kind named by ``value``; INTERNAL for anything unknown (an engine newer than this client)."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.INTERNAL

    def __str__(self) -> str:
        return self.value


class UserError(Exception):
    """Bad input or a condition the user can fix. ``str(exc)`` is shown as is."""


class LoadStopped(UserError):
    """The user stopped a model load before it finished (``Engine.cancel_load``); nothing of it stays loaded.
    ``restored``: what the load of the model that answered before reported, when that one was loaded again."""

    restored: dict[str, object] | None = None


class ModelFileError(UserError):
    """A model file that is missing, empty, not GGUF or damaged."""


class EngineError(Exception):
    """The engine reported an error for a request. ``kind`` is the protocol's ``ErrorKind`` (a str enum, so
    ``exc.kind == "context_full"`` still reads true)."""

    def __init__(self, kind: ErrorKind | str, message: str) -> None:
        super().__init__(message)
        self.kind = ErrorKind.of(kind)


class EngineCrashed(EngineError):
    """The engine process died (a native abort, a kill). The next request starts a new one."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(ErrorKind.CRASHED, message)
        self.exit_code = exit_code


class EngineClosed(EngineError):
    """The engine was closed (quit, a model switch's restart, a test's teardown) while the request was in
    flight. Not a crash: nothing restarts the engine for it."""

    def __init__(self, message: str = "the engine was closed while this request ran") -> None:
        super().__init__(ErrorKind.CLOSED, message)
