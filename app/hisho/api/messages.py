"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) over the same pipeline
as chat completions: the request becomes the chat ``Job`` (``api.messages_request``), ``Backend.open`` runs it
(one template rendering, one tool-call parser, one grammar, the disk prompt cache, the limits, cancellation) and
``api.answer`` reads the reply; this module only renders Anthropic's shapes.

Rules of use: ``routes(backend, key)`` gives the two routes for ``api.app``'s list. Every answer is JSON or SSE in
Anthropic's shapes, an error included (``{"type": "error", "error": {"type", "message"}}``), never a
traceback; the key is read from ``x-api-key`` or ``Authorization: Bearer``. Usage tells what the engine did:
``input_tokens`` the prompt tokens it read, ``cache_read_input_tokens`` those it restored instead (from the
sequence's cells or the disk cache), ``cache_creation_input_tokens`` 0 (the cache is written on the server's own
account, beside the reply).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hisho.api import answer, http, messages_request, tooling
from hisho.api.answer import Failed, Outcome, TextDelta, ThinkingDelta
from hisho.api.backend import Backend, api_error, timeout_error
from hisho.api.errors import ApiError
from hisho.api.shapes import Job
from hisho.core.engine.seam import Capability
from hisho.core.formats.tools import ToolCall

log = logging.getLogger("hisho.api")

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "stop_sequence": "stop_sequence"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
Handler = Callable[[Request], Awaitable[Response]]


def error_body(exc: ApiError) -> dict[str, Any]:
    message = exc.message
    if exc.param and exc.param not in message:  # the field is named in the message (Anthropic has no 'param')
        message = f"{exc.param}: {message}"
    return {"type": "error", "error": {"type": ERROR_TYPES.get(_status(exc), "api_error"), "message": message}}


def _status(exc: ApiError) -> int:
    # Anthropic answers 529 overloaded where the engine is busy with other work (the chat route's 503 busy).
    return 529 if exc.code == "engine_busy" else exc.status


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(error_body(exc), status_code=_status(exc), headers=exc.headers or None)


def _pointed(exc: ApiError, job: Job) -> ApiError:
    """The engine's 400 for a schema it cannot make a grammar of, naming the request's field; an unknown model
    with the setting Claude Code reads its model names from."""
    if exc.status == 400 and exc.param is None and "JSON schema" in exc.message:
        param = "tools[].input_schema" if job.extras.tools else "output_config.format.schema"
        return ApiError(400, exc.message, param=param)
    if exc.code == "model_not_found":
        return ApiError(404, exc.message + " (Claude Code: set ANTHROPIC_MODEL and ANTHROPIC_SMALL_FAST_MODEL to "
                                           "it)", param="model")
    return exc


def routes(backend: Backend, key: str) -> list[Route]:
    def guarded(handler: Handler) -> Handler:
        async def in_anthropics_shape(request: Request) -> Response:
            try:
                return await handler(request)
            except ApiError:
                raise
            except Exception as exc:   # never the app's OpenAI-shaped 500
                log.exception("Messages route failed")
                return error_response(ApiError(500, f"internal error ({type(exc).__name__}); details in the log"))
        return http.guarded(in_anthropics_shape, key, error_response, x_api_key=True,
                            refused="missing or wrong API key (x-api-key or Authorization: Bearer; Settings → API "
                                    "shows it)")

    async def create(request: Request) -> Response:
        body = await http.read_body(request, backend.limits.max_body_bytes)
        # Off the event loop: an image block is decoded and re-encoded while parsing (api/images.py).
        job = await asyncio.get_running_loop().run_in_executor(None, messages_request.parse, body, backend.defaults,
                                                               backend.max_tokens)
        return await http.unless_gone(request, _answer(backend, job, key))

    async def count(request: Request) -> Response:
        body = await http.read_body(request, backend.limits.max_body_bytes)
        job = await asyncio.get_running_loop().run_in_executor(
            None, lambda: messages_request.parse(body, backend.defaults, backend.max_tokens, count=True))
        return await http.unless_gone(request, _count(backend, job))

    return [Route("/v1/messages", guarded(create), methods=["POST"]),
            Route("/v1/messages/count_tokens", guarded(count), methods=["POST"])]


async def _answer(backend: Backend, job: Job, key: str) -> Response:
    try:
        reply = await backend.open(job, key)
    except ApiError as exc:
        return error_response(_pointed(exc, job))
    ids = "msg_" + uuid.uuid4().hex[:24]
    if not job.stream:
        try:
            outcome = await answer.collect(reply, job)
        except ApiError as exc:
            return error_response(_pointed(exc, job))
        return JSONResponse(message(ids, reply.model_id, outcome))
    if reply.error is not None and reply.queue.qsize() <= 1:  # refused before any token: a plain HTTP error
        return error_response(_pointed(reply.error, job))
    return StreamingResponse(_events(answer.stream(reply, job), ids, reply.model_id, reply.close),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def usage(outcome: Outcome) -> dict[str, Any]:
    return {"input_tokens": outcome.read_tokens, "output_tokens": outcome.completion_tokens,
            "cache_read_input_tokens": outcome.cached_tokens, "cache_creation_input_tokens": 0}


def _input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` is (the grammar makes them one)."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        log.warning("tool call %s: arguments are not a JSON object: %.200s", call.name, call.arguments)
        return {}
    return value


def message(ids: str, model: str, outcome: Outcome) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if outcome.reasoning:
        content.append({"type": "thinking", "thinking": outcome.reasoning, "signature": ""})
    if outcome.text:
        content.append({"type": "text", "text": outcome.text})
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c)} for c in outcome.calls]
    return {"id": ids, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": STOP_REASONS.get(outcome.finish, "end_turn"), "stop_sequence": outcome.stop_sequence,
            "usage": usage(outcome)}


def _event(kind: str, **fields: Any) -> bytes:
    return http.sse({"type": kind, **fields}, event=kind)


async def _events(items: AsyncIterator[TextDelta | ThinkingDelta | Outcome | Failed], ids: str, model: str,
                  close: Callable[[], None]) -> AsyncIterator[bytes]:
    """The SSE stream. When the client goes away Starlette cancels this generator: ``finally`` cancels the
    engine's sequence at once."""
    index, open_kind = -1, ""
    try:
        start: dict[str, Any] = {"id": ids, "type": "message", "role": "assistant", "model": model, "content": [],
                 "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                           "cache_creation_input_tokens": 0}}
        yield _event("message_start", message=start)
        yield _event("ping")
        async for item in items:
            if isinstance(item, (TextDelta, ThinkingDelta)):
                kind = "text" if isinstance(item, TextDelta) else "thinking"
                if open_kind != kind:
                    if open_kind:
                        yield _event("content_block_stop", index=index)
                    index, open_kind = index + 1, kind
                    block = {"type": "text", "text": ""} if kind == "text" else \
                        {"type": "thinking", "thinking": "", "signature": ""}
                    yield _event("content_block_start", index=index, content_block=block)
                delta = {"type": "text_delta", "text": item.text} if kind == "text" else \
                    {"type": "thinking_delta", "thinking": item.text}
                yield _event("content_block_delta", index=index, delta=delta)
                continue
            if open_kind:
                yield _event("content_block_stop", index=index)
                open_kind = ""
            if isinstance(item, Failed):
                yield http.sse(error_body(item.error), event="error")
                return
            for call in item.calls:
                index += 1
                yield _event("content_block_start", index=index,
                             content_block={"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
                yield _event("content_block_delta", index=index,
                             delta={"type": "input_json_delta",
                                    "partial_json": json.dumps(_input(call), ensure_ascii=False)})
                yield _event("content_block_stop", index=index)
            yield _event("message_delta", delta={"stop_reason": STOP_REASONS.get(item.finish, "end_turn"),
                                                 "stop_sequence": item.stop_sequence}, usage=usage(item))
            yield _event("message_stop")
    finally:
        close()


async def _count(backend: Backend, job: Job) -> Response:
    """``{"input_tokens": N}``: the prompt as the engine tokenizes it for the reply (template, tools, thinking
    switch), nothing generated."""
    engine, name = backend.engine, backend.model
    if not name.accepts(job.model):
        raise _pointed(ApiError(404, f"the model '{job.model}' does not exist; this server has '{name.id}'",
                                     param="model", code="model_not_found"), job)
    extras = job.extras
    if extras.tools and Capability.SERVE.value not in engine.capabilities:
        raise ApiError(400, "counting with tools needs the local engine; the connected server does not take "
                            "them through this API", param="tools")
    tooling.apply(extras, job.sampling, engine.load_info)  # refuses tools the template cannot carry
    if Capability.SERVE.value not in engine.capabilities:
        extras.template_kwargs = None  # a remote server renders its own template

    def tokenize() -> list[int]:
        return engine.tokenize(messages=job.messages, tools=extras.tools, template_kwargs=extras.template_kwargs)

    work = asyncio.get_running_loop().run_in_executor(None, tokenize)
    try:
        tokens = await asyncio.wait_for(work, backend.limits.request_timeout_s)
    except TimeoutError:
        raise timeout_error() from None
    except Exception as exc:
        raise api_error(exc) from None
    return JSONResponse({"input_tokens": len(tokens)})
