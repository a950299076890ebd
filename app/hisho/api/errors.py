"""OpenAI-shaped errors of the API. No I/O."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error a client sees as OpenAI's ``{"error": {message, type, param, code}}`` with ``status``."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
