"""The Starlette application: routes, the API key check, CORS, OpenAI-shaped errors.

Rules of use: ``make_app(backend, key, cors_origins)``; every response, an error included, is JSON or SSE in
OpenAI's shapes (Anthropic's on the Messages routes, ``api.messages``), never a traceback. Every route but ``/health`` needs ``Authorization: Bearer <key>``, checked
before the body is read; a body over ``backend.limits.max_body_bytes`` is refused (413) before it is read
whole. From the moment a request is parsed the client's connection is watched: a client that leaves, streamed
or not, has its engine work cancelled at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hisho.api import answer, http, messages, responses, tooling, waits
from hisho.api.backend import Backend, Reply
from hisho.api.shapes import ApiError, Ids, Job, parse_chat, parse_completion, usage

log = logging.getLogger("hisho.api")


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


def _sse(data: dict[str, Any] | str) -> bytes:
    return http.sse(data)


def make_app(backend: Backend, key: str, cors_origins: list[str] | None = None) -> Starlette:
    def guarded(handler: http.Handler) -> http.Handler:
        return http.guarded(handler, key, error_response)

    async def health(request: Request) -> Response:
        # ``engine``: what it works on now (hisho.api.waits.ACTIVITY); ``queue``: requests waiting behind it.
        return JSONResponse({"status": "ok", "model": backend.model_id, "busy": backend.busy,
                             "cancelled": backend.cancelled, "timed_out": backend.timed_out,
                             "engine": waits.running(backend.engine), "queue": backend.waits.snapshot()})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": backend.model_id, "object": "model", "created": 0, "owned_by": "hisho"}]})

    async def chat(request: Request) -> Response:
        body = await http.read_body(request, backend.limits.max_body_bytes)
        # On a worker thread: an image part is decoded and re-encoded there (api/images.py), up to a second.
        job = await anyio.to_thread.run_sync(parse_chat, body, backend.defaults, backend.max_tokens)
        return await http.unless_gone(request, _answer(backend, job, key))

    async def completions(request: Request) -> Response:
        job = parse_completion(await http.read_body(request, backend.limits.max_body_bytes), backend.defaults,
                               backend.max_tokens)
        return await http.unless_gone(request, _answer(backend, job, key))

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
        *messages.routes(backend, key),  # Anthropic's Messages API, its own key check and error shape
        *responses.routes(backend, key),  # OpenAI's Responses API, with the responses it keeps
    ]
    middleware = []
    if cors_origins:  # off unless the user adds an origin (Settings → API)
        middleware.append(Middleware(CORSMiddleware, allow_origins=cors_origins,
                                     allow_methods=["GET", "POST", "DELETE"],
                                     allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version",
                                                   "anthropic-beta"]))
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


# Chat completions' words for the neutral finish (answer.Outcome.finish): a stop string is OpenAI's "stop".
OPENAI_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "stop_sequence": "stop"}


async def _whole(reply: Reply, job: Job, ids: Ids) -> Response:
    try:
        out = await answer.collect(reply, job)
    except ApiError as exc:
        return error_response(exc)
    body = ids.whole(out.text, OPENAI_FINISH[out.finish],
                     usage(out.prompt_tokens, out.completion_tokens, out.cached_tokens))
    message = body["choices"][0].get("message")
    if job.extras.family is not None and message is not None:  # read for calls: no text is null beside calls
        message["content"] = out.text or None
        if out.calls:
            message["tool_calls"] = tooling.call_parts(out.calls)
    if job.kind == "chat" and out.reasoning and message is not None:  # as llama-server and DeepSeek's API give it
        message["reasoning_content"] = out.reasoning
    return JSONResponse(body)


async def _events(reply: Reply, job: Job, ids: Ids) -> AsyncIterator[bytes]:
    """The SSE stream. When the client goes away Starlette cancels this generator: ``finally`` cancels the
    engine's sequence at once."""
    try:
        if job.kind == "chat":
            yield _sse(ids.delta(None, role=True))
        async for item in answer.stream(reply, job):
            if isinstance(item, answer.ThinkingDelta):
                if job.kind == "chat":
                    yield _sse(ids.reasoning_delta(item.text))
            elif isinstance(item, answer.TextDelta):
                yield _sse(ids.delta(item.text))
            elif isinstance(item, answer.Failed):
                yield _sse(item.error.body())
            else:
                if item.calls:   # calls come whole at the end
                    yield _sse(ids.envelope([{"index": 0, "delta": {"tool_calls": tooling.call_deltas(item.calls)},
                                              "finish_reason": None}], chunk=True))
                yield _sse(ids.delta(None, OPENAI_FINISH[item.finish]))
                if job.include_usage:
                    yield _sse({**ids.envelope([], chunk=True),
                                "usage": usage(item.prompt_tokens, item.completion_tokens, item.cached_tokens)})
        yield _sse("[DONE]")
    finally:
        reply.close()
