"""OpenAI's Responses API over the same chat pipeline: ``POST /v1/responses`` (whole or streamed), ``GET`` and
``DELETE /v1/responses/{id}`` for stored responses. A thin translation: the request becomes a chat ``Job``
(``responses_input``), ``Backend.open`` runs it as it runs a chat completion (limits, queue, prompt cache,
cancellation), ``answer`` reads the reply, ``responses_output`` renders it.

Rules of use: ``routes(backend, key)`` is the list ``api.app`` mounts. ``store`` (default true) keeps the
response in ``backend.responses`` (``hisho.core.stored_responses``; None: nothing is kept, and every id is
unknown); ``previous_response_id`` continues from a kept one, a missing or evicted one is a 404 naming it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hisho.api import answer, http
from hisho.api.backend import Backend, Reply
from hisho.api.errors import ApiError
from hisho.api.responses_input import Request, parse, previous_id
from hisho.api.responses_output import Events, Shell, record
from hisho.core.db import DatabaseUnavailable

log = logging.getLogger("hisho.api")

Handler = Callable[[HttpRequest], Awaitable[Response]]


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


def _not_found(response_id: str, param: str) -> ApiError:
    return ApiError(404, f"no stored response with id {response_id!r} (never stored, deleted, or evicted: this "
                         "server keeps the newest ones)", param=param, code="not_found")


async def stored(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` (a database call) off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(None, call, *args)


def routes(backend: Backend, key: str) -> list[Route]:
    def guarded(handler: Handler) -> Handler:
        return http.guarded(handler, key, _error)

    async def create(request: HttpRequest) -> Response:
        body = await http.read_body(request, backend.limits.max_body_bytes)
        wanted = previous_id(body)
        previous = None
        if wanted is not None:
            previous = await stored(backend.responses.get, wanted) if backend.responses is not None else None
            if previous is None:
                raise _not_found(wanted, "previous_response_id")
        # Off the event loop: an image part is decoded and re-encoded while parsing (api/images.py).
        parsed = await stored(parse, body, previous, backend.defaults, backend.max_tokens)
        return await http.unless_gone(request, _answer(backend, parsed, key))

    async def one(request: HttpRequest) -> Response:
        response_id = str(request.path_params["response_id"])
        if request.method == "DELETE":
            gone = backend.responses is not None and await stored(backend.responses.delete, response_id)
            if not gone:
                raise _not_found(response_id, "response_id")
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        kept = await stored(backend.responses.get, response_id) if backend.responses is not None else None
        if kept is None:
            raise _not_found(response_id, "response_id")
        return JSONResponse(kept["response"])

    return [Route("/v1/responses", guarded(create), methods=["POST"]),
            Route("/v1/responses/{response_id}", guarded(one), methods=["GET", "DELETE"])]


async def _answer(backend: Backend, request: Request, key: str) -> Response:
    try:
        reply = await backend.open(request.job, key)
    except ApiError as exc:
        return _error(request.rename(exc))
    shell = Shell(request, reply.model_id)
    if not request.job.stream:
        try:
            outcome = await answer.collect(reply, request.job)
        except ApiError as exc:
            return _error(request.rename(exc))
        body = shell.whole(outcome)
        await _keep(backend, request, body, outcome)
        return JSONResponse(body)
    if reply.error is not None and reply.queue.qsize() <= 1:  # refused before any token: a plain HTTP error
        reply.close()
        return _error(request.rename(reply.error))
    return StreamingResponse(_events(backend, reply, request, shell), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _keep(backend: Backend, request: Request, body: dict[str, Any], outcome: answer.Outcome) -> None:
    if request.store and backend.responses is not None:
        try:
            await stored(backend.responses.put, body["id"], record(request, body, outcome))
        except DatabaseUnavailable as exc:  # the answer still goes out; only its continuation is lost
            log.warning("API response %s not kept: %s", body["id"], exc)


async def _events(backend: Backend, reply: Reply, request: Request, shell: Shell) -> AsyncIterator[bytes]:
    """The SSE stream. A client that leaves has Starlette cancel this generator; ``answer.stream`` then cancels
    the engine's sequence."""
    events = Events(shell)
    for chunk in events.start():
        yield chunk
    async for piece in answer.stream(reply, request.job):
        if isinstance(piece, answer.Failed):
            request.rename(piece.error)
        for chunk in events.feed(piece):
            yield chunk
    if events.final is not None and events.outcome is not None:
        await _keep(backend, request, events.final, events.outcome)  # kept before the client hears it ended
        yield events.closing()
