"""The Starlette application: routes, the API key check, CORS, OpenAI-shaped errors.

Rules of use: ``make_app(backend, key, cors_origins)``; every response, an error included, is JSON or SSE in
OpenAI's shapes, never a traceback. Every route but ``/health`` needs ``Authorization: Bearer <key>``, checked
before the body is read; a body over ``backend.limits.max_body_bytes`` is refused (413) before it is read
whole. From the moment a request is parsed the client's connection is watched: a client that leaves, streamed
or not, has its engine work cancelled at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hisho.api import tooling, waits
from hisho.api.backend import Backend, Reply, Thought
from hisho.api.shapes import FINISH, ApiError, Ids, Job, StopFilter, parse_chat, parse_completion, usage
from hisho.core.formats.tools import ToolCall

log = logging.getLogger("hisho.api")


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


def _sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _too_large(limit: int) -> ApiError:
    # Connection: close, since the rest of the body is never read.
    return ApiError(413, f"the request body is larger than this server takes ({limit} bytes; Settings → API)",
                    code="request_too_large", headers={"Connection": "close"})


async def _body(request: Request, limit: int) -> Any:
    """The JSON body, read up to ``limit`` bytes: a declared length over it is refused before reading a byte,
    a chunked body as soon as it passes it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
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


async def _unless_gone(request: Request, work: Awaitable[Response]) -> Response:
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


def make_app(backend: Backend, key: str, cors_origins: list[str] | None = None) -> Starlette:
    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), key.encode())

    Handler = Callable[[Request], Awaitable[Response]]

    def guarded(handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            if not authorized(request):
                return error_response(ApiError(401, "missing or wrong API key (Settings → API shows it)",
                                               code="invalid_api_key"))
            try:
                return await handler(request)
            except ApiError as exc:
                return error_response(exc)
        return run

    async def health(request: Request) -> Response:
        # ``engine``: what it works on now (hisho.api.waits.ACTIVITY); ``queue``: requests waiting behind it.
        return JSONResponse({"status": "ok", "model": backend.model_id, "busy": backend.busy,
                             "cancelled": backend.cancelled, "timed_out": backend.timed_out,
                             "engine": waits.running(backend.engine), "queue": backend.waits.snapshot()})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": backend.model_id, "object": "model", "created": 0, "owned_by": "hisho"}]})

    async def chat(request: Request) -> Response:
        job = parse_chat(await _body(request, backend.limits.max_body_bytes), backend.defaults, backend.max_tokens)
        return await _unless_gone(request, _answer(backend, job, key))

    async def completions(request: Request) -> Response:
        job = parse_completion(await _body(request, backend.limits.max_body_bytes), backend.defaults,
                               backend.max_tokens)
        return await _unless_gone(request, _answer(backend, job, key))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: "no such route", 405: "method not allowed"}.get(status, "request failed")
        return error_response(ApiError(status, f"{message}: {request.method} {request.url.path}"))

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("API route failed")
        return error_response(ApiError(500, f"internal error ({type(exc).__name__}); details in the log",
                                       type_="server_error"))

    routes = [
        Route("/health", health),
        Route("/v1/models", guarded(models)),
        Route("/v1/chat/completions", guarded(chat), methods=["POST"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
    ]
    middleware = []
    if cors_origins:  # off unless the user adds an origin (Settings → API)
        middleware.append(Middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                                     allow_headers=["authorization", "content-type"]))
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={HTTPException: http_error, Exception: internal})


async def _answer(backend: Backend, job: Job, key: str) -> Response:
    try:
        reply = await backend.open(job, key)
    except ApiError as exc:
        return error_response(exc)
    ids = Ids(job.kind, reply.model_id)
    if not job.stream:
        return await _whole(reply, job, ids)
    if reply.error is not None and reply.queue.qsize() <= 1:  # refused before any token: a plain HTTP error
        return error_response(reply.error)
    return StreamingResponse(_events(reply, job, ids), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _whole(reply: Reply, job: Job, ids: Ids) -> Response:
    try:
        parts = [text async for text in reply.texts()]
    finally:
        reply.close()
    result = reply.result
    if reply.error is not None:
        return error_response(reply.error)
    assert result is not None
    stops = StopFilter(job.stops)
    calls: list[ToolCall] = []
    if job.extras.family is not None:  # a request with tools: its calls read from the raw pieces
        parsed = tooling.read_calls(job.extras, "".join(parts), result.stop_reason)
        text, calls = stops.feed(parsed.content) + stops.flush(), parsed.calls
    else:
        text = stops.feed("".join(parts)) + stops.flush()
    finish = tooling.finish_reason(calls, FINISH.get(result.stop_reason, "stop"), stops.stopped)
    body = ids.whole(text, finish, usage(result.prompt_tokens, result.completion_tokens, result.cached_tokens))
    if job.extras.family is not None:  # read for calls: no text is null, as OpenAI writes it beside calls
        message = body["choices"][0]["message"]
        message["content"] = text or None
        if calls:
            message["tool_calls"] = tooling.call_parts(calls)
    if job.kind == "chat" and result.reasoning:  # as llama-server and DeepSeek's API give it
        body["choices"][0]["message"]["reasoning_content"] = result.reasoning
    return JSONResponse(body)


async def _events(reply: Reply, job: Job, ids: Ids) -> AsyncIterator[bytes]:
    """The SSE stream. When the client goes away Starlette cancels this generator: ``finally`` cancels the
    engine's sequence at once."""
    stops = StopFilter(job.stops)
    calls_in = tooling.call_stream(job.extras)  # content streams, calls come whole at the end
    calls: list[ToolCall] = []
    try:
        if job.kind == "chat":
            yield _sse(ids.delta(None, role=True))
        async for text in reply.items():
            if isinstance(text, Thought):
                if job.kind == "chat":
                    yield _sse(ids.reasoning_delta(text))
                continue
            out = stops.feed(calls_in.feed(text) if calls_in is not None else text)
            if out:
                yield _sse(ids.delta(out))
            if stops.stopped:
                reply.close()  # the engine may still be a token or two behind the stop string
        ended = reply.result.stop_reason if reply.result is not None else ""
        if calls_in is not None:
            rest, calls = calls_in.finish(cut=ended in tooling.CUT)
            tail = stops.feed(rest)
            if tail:
                yield _sse(ids.delta(tail))
        tail = stops.flush()
        if tail:
            yield _sse(ids.delta(tail))
        if calls and reply.error is None:
            yield _sse(ids.envelope([{"index": 0, "delta": {"tool_calls": tooling.call_deltas(calls)},
                                      "finish_reason": None}], chunk=True))
        if reply.error is not None:
            yield _sse(reply.error.body())
        else:
            result = reply.result
            assert result is not None
            finish = tooling.finish_reason(calls, FINISH.get(result.stop_reason, "stop"), stops.stopped)
            yield _sse(ids.delta(None, finish))
            if job.include_usage:
                yield _sse({**ids.envelope([], chunk=True),
                            "usage": usage(result.prompt_tokens, result.completion_tokens, result.cached_tokens)})
        yield _sse("[DONE]")
    finally:
        reply.close()
