"""What every route of the API does with HTTP, whatever its wire format: read a bounded JSON body, watch the
client's connection, write server-sent events. No engine, no protocol shapes.

Rules of use: ``authorized(request, key)`` checks the API key before a body is read. ``read_body(request, limit)`` raises ``ApiError`` (413 over the limit, 400 for bad JSON); a route
renders it in its own protocol's error shape. ``unless_gone(request, work)`` runs a route's work and cancels it
the moment the client leaves. ``sse(data, event=...)`` is one event's bytes (``event`` names it, as Anthropic's
and OpenAI's Responses streams do).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from hisho.api.errors import ApiError

log = logging.getLogger("hisho.api")


def authorized(request: Request, key: str, *, x_api_key: bool = False) -> bool:
    """Whether the request carries the API key: ``Authorization: Bearer <key>``, or (``x_api_key``, Anthropic's
    clients) ``x-api-key: <key>``."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), key.encode()):
        return True
    given = request.headers.get("x-api-key") if x_api_key else None
    return given is not None and secrets.compare_digest(given.strip().encode(), key.encode())


Handler = Callable[[Request], Awaitable[Response]]


def guarded(handler: Handler, key: str, render: Callable[[ApiError], Response], *, x_api_key: bool = False,
            refused: str = "missing or wrong API key (Settings → API shows it)") -> Handler:
    """``handler`` behind the key check (``authorized``), its ``ApiError`` rendered by ``render`` in the route's
    own protocol shape: a 401 before the body is read, a client's mistake as the error it names."""
    async def run(request: Request) -> Response:
        if not authorized(request, key, x_api_key=x_api_key):
            return render(ApiError(401, refused, code="invalid_api_key"))
        try:
            return await handler(request)
        except ApiError as exc:
            return render(exc)
    return run


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def too_large(limit: int) -> ApiError:
    # Connection: close, since the rest of the body is never read.
    return ApiError(413, f"the request body is larger than this server takes ({limit} bytes; Settings → API)",
                    code="request_too_large", headers={"Connection": "close"})


async def read_body(request: Request, limit: int) -> Any:
    """The JSON body, read up to ``limit`` bytes: a declared length over it is refused before reading a byte,
    a chunked body as soon as it passes it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise ApiError(400, "the request body nests arrays or objects too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not valid JSON") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client has closed its connection (the body has been read: nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable[Response]) -> Response:
    """``work``'s response, or, if the client leaves first, ``work`` cancelled (its ``finally`` cancels the
    engine's sequence) and an empty response nobody reads. Covers the wait for a free sequence and the prefill
    of every request, and the whole reply of one not streamed; a stream is then watched by Starlette."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        gone.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    log.info("client left before its reply: %s cancelled", request.url.path)
    return Response(status_code=499)
