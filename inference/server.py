"""The protocol layer: HTTP routes, validation answers, and SSE framing. No torch here."""

import asyncio
import contextlib
import logging
import time
import uuid

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .async_engine import EngineUnavailable, QueueFull, RequestFailed, RequestStream
from .config import InferenceConfig
from .metrics import RequestClock
from .protocol import (
    SSE_DONE, SSE_HEARTBEAT, ChatRequest, CompletionShape, ProtocolError, error_body,
    parse_chat_request, parse_tokenize_request, sse, tokenized,
)
from .service import InferenceService, ServiceState

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 15.0
# What a request's stream may raise once it is open: the request failed, the others may not have.
STREAM_ERRORS = (EngineUnavailable, RequestFailed, ValueError)
_HEARTBEAT = object()


class EventStreamResponse(StreamingResponse):
    """An SSE response that notices a departed client at once, even while no event is due.

    Starlette only listens for `http.disconnect` on older ASGI servers; here a listener always
    runs beside the stream and cancels it, and `on_close` runs whatever way the response ends.
    """

    media_type = "text/event-stream"

    def __init__(self, content, on_close, headers=None):
        super().__init__(content, headers={
            "Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})
        })
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as tasks:

                async def stream_then_stop() -> None:
                    await self.stream_response(send)
                    tasks.cancel_scope.cancel()

                tasks.start_soon(stream_then_stop)
                await self.listen_for_disconnect(receive)
                tasks.cancel_scope.cancel()
        except OSError:
            pass  # the client went away while we were sending
        finally:
            self._on_close()


# How long a refused client waits before it tries again: a waiting place comes free as soon as
# a running answer ends (429), a model loads in seconds to a minute (503).
RETRY_AFTER_SECONDS = {429: 1, 503: 5}


def error_response(error: ProtocolError) -> JSONResponse:
    retry_after = RETRY_AFTER_SECONDS.get(error.status)
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


async def chat_completions(request: Request) -> Response:
    service: InferenceService = request.app.state.service
    try:
        chat = parse_chat_request(await _body_when_ready(request, service))
        # Encoding a long prompt takes a while: it runs on one of the service's tokenizer threads.
        prompt, params = await asyncio.wrap_future(service.submit_prompt(chat))
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        stream = service.async_engine.open(request_id, prompt, params)
    except ProtocolError as error:
        return error_response(error)
    except QueueFull as error:
        return error_response(ProtocolError(429, str(error), "queue_full"))
    except EngineUnavailable as error:
        return error_response(ProtocolError(503, str(error), "service_unavailable"))
    service.metrics.prompt_tokens.inc(len(prompt))
    shape = CompletionShape(f"chatcmpl-{request_id}", service.model_name)
    # The prompt's size is known before its first token: a caller whose stream ends early (a
    # Stop, a failure) still learns it, where the usage chunk at the end never comes.
    headers = {"X-Request-Id": request_id, "X-Prompt-Tokens": str(len(prompt))}
    if chat.stream:
        events = completion_events(stream, shape, chat, RequestClock(service.metrics), service)
        return EventStreamResponse(events, on_close=stream.close, headers=headers)
    return await _whole(request, stream, shape, RequestClock(service.metrics), service, headers)


async def tokenize(request: Request) -> Response:
    """vLLM's /tokenize: the count a completion of these messages would report as prompt_tokens."""
    service: InferenceService = request.app.state.service
    try:
        asked = parse_tokenize_request(await _body_when_ready(request, service))
        token_ids = await asyncio.wrap_future(service.submit_tokenize(asked))
    except ProtocolError as error:
        return error_response(error)
    return JSONResponse(tokenized(token_ids, service.max_model_len))


async def _body_when_ready(request: Request, service: InferenceService) -> bytes:
    """The body of a request the service can serve now, or a 503 before it is read."""
    if not service.healthy:
        raise ProtocolError(503, _unavailable_message(service), "service_unavailable")
    return await _body(request, service.config.max_body_bytes)


async def _body(request: Request, limit: int) -> bytes:
    """The whole body, or a 413 as soon as it is known to exceed `limit` bytes."""
    too_large = ProtocolError(413, f"the request body exceeds {limit} bytes", "body_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():  # a chunked body declares no length
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


async def completion_events(stream: RequestStream, shape: CompletionShape, chat: ChatRequest,
                            clock: RequestClock, service: InferenceService):
    """The SSE body of a streamed completion.

    It sends what is ready and never waits: outputs that queued while it was busy (the client
    or this process falling behind the engine) go out as one content chunk with their texts
    joined in order, and a lone output goes at once. The first text always goes alone, at once,
    so the time to first token is never traded away. Keeping up, it sends one event per token.
    """
    yield sse(shape.chunk({"role": "assistant"}))
    text_sent = False
    try:
        async for output in _with_heartbeats(stream):
            if output is _HEARTBEAT:
                yield SSE_HEARTBEAT
                continue
            outputs = [output, *stream.ready()] if text_sent else [output]
            clock.tokens(outputs)
            text = "".join(each.text for each in outputs)
            if text:
                text_sent = True
                yield shape.content_event(text)
            last = outputs[-1]  # only the last can be the finished one
            if last.finished:
                reason = last.finish_reason.value
                service.metrics.requests.labels(reason).inc()
                yield sse(shape.chunk({}, reason))
                if chat.include_usage:
                    yield sse(shape.usage_chunk(last.num_prompt_tokens, last.num_output_tokens,
                                                last.num_reused_tokens))
    except STREAM_ERRORS as error:
        service.metrics.requests.labels("error").inc()
        yield sse(error_body(str(error), "server_error", "engine_error"))
    yield SSE_DONE


async def _with_heartbeats(stream: RequestStream):
    """The stream's outputs, with a heartbeat marker whenever it is quiet for a while.

    Each wait costs a timer, not a task: cancelling a queue's `get` loses no item, and a
    departed client's cancellation passes through the timeout untouched.
    """
    while True:
        quiet = asyncio.timeout(HEARTBEAT_INTERVAL_S)
        try:
            async with quiet:
                output = await anext(stream, None)
        except TimeoutError:
            if not quiet.expired():
                raise
            yield _HEARTBEAT
            continue
        if output is None:
            return
        yield output


async def _whole(request: Request, stream: RequestStream, shape: CompletionShape,
                 clock: RequestClock, service: InferenceService, headers: dict) -> Response:
    async def collect():
        parts, last = [], None
        async for output in stream:
            clock.tokens((output,))
            parts.append(output.text)
            last = output
        return "".join(parts), last

    collecting = asyncio.ensure_future(collect())
    departed = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collecting, departed}, return_when=asyncio.FIRST_COMPLETED)
        if not collecting.done():
            return Response(status_code=499)  # nobody is listening any more
        try:
            text, last = collecting.result()
        except STREAM_ERRORS as error:
            service.metrics.requests.labels("error").inc()
            return error_response(ProtocolError(500, str(error), "engine_error"))
    finally:
        for task in (collecting, departed):
            task.cancel()
        stream.close()
    reason = last.finish_reason.value
    service.metrics.requests.labels(reason).inc()
    body = shape.completion(text, reason, last.num_prompt_tokens, last.num_output_tokens,
                            last.num_reused_tokens)
    return JSONResponse(body, headers=headers)


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _unavailable_message(service: InferenceService) -> str:
    if service.state is ServiceState.LOADING:
        return "the model is still loading"
    return f"the engine is not running: {service.health_error()}"


async def models(request: Request) -> JSONResponse:
    """The served model once it is loaded; 503 before (as llama.cpp's server answers while it
    loads), not an empty list: a client that lists models to pick one (the chat's catalogue)
    would take a service restarting for one that serves nothing, and refuse its model's answers
    as gone rather than wait for it."""
    service: InferenceService = request.app.state.service
    if service.state is not ServiceState.READY:
        return error_response(ProtocolError(503, _unavailable_message(service), "service_unavailable"))
    return JSONResponse({"object": "list", "data": [_model_card(service)]})


async def model(request: Request) -> JSONResponse:
    """OpenAI's retrieve: the served model by its id (which may hold slashes: org/name)."""
    service: InferenceService = request.app.state.service
    try:
        # Its name is known once it is loaded: before, every id would be "not found".
        if service.state is not ServiceState.READY:
            raise ProtocolError(503, _unavailable_message(service), "service_unavailable")
        service.check_model(request.path_params["model"])
    except ProtocolError as error:
        return error_response(error)
    return JSONResponse(_model_card(service))


def _model_card(service: InferenceService) -> dict:
    return {"id": service.model_name, "object": "model", "created": int(time.time()),
            "owned_by": "inference", "max_model_len": service.max_model_len}


async def health(request: Request) -> JSONResponse:
    service: InferenceService = request.app.state.service
    if service.healthy:
        return JSONResponse({"status": "ok", "model": service.model_name,
                             "decode_step": service.engine.decode_step().value,
                             "matrices": service.engine.matrix_layout()})
    status = "loading" if service.state is ServiceState.LOADING else "unhealthy"
    return JSONResponse({"status": status, "error": service.health_error()}, status_code=503)


async def metrics(request: Request) -> Response:
    service: InferenceService = request.app.state.service
    return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")


async def _unplanned_error(request: Request, error: Exception) -> JSONResponse:
    """Whatever escapes a route still answers in the API's shape.

    The details stay out of the answer: Starlette raises the error on after this answer, and
    the server logs it with its traceback.
    """
    body = error_body("the service failed to answer this request", "server_error", "internal_error")
    return JSONResponse(body, status_code=500)


async def _client_gone(request: Request, error: ClientDisconnect) -> Response:
    """A client that hung up before its body was whole: nobody is listening, as in `_whole`,
    and nothing failed here (uncaught, it would be logged as the service's error, traceback
    and all)."""
    return Response(status_code=499)


async def _routing_error(request: Request, error: HTTPException) -> JSONResponse:
    """A path no route serves (404) or a method its route does not take (405, with Allow), in
    OpenAI's error shape as every other refusal here, where Starlette answers plain text."""
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "bad_request")
    message = f"{request.method} {request.url.path}: {error.detail.lower()}"
    return JSONResponse(error_body(message, "invalid_request_error", code),
                        status_code=error.status_code, headers=error.headers)


def create_app(service: InferenceService, load: bool = True) -> Starlette:
    """The ASGI app; with `load`, the model loads in the background while /health says so."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if load and service.state is ServiceState.LOADING:
            service.load_in_background()
        yield
        service.stop()

    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ], lifespan=lifespan,
        exception_handlers={HTTPException: _routing_error, ClientDisconnect: _client_gone,
                            Exception: _unplanned_error})
    app.state.service = service
    return app


# The exit status of a service whose engine's step loop died (a stop by a signal exits 0).
EXIT_ENGINE_DIED = 1


def serve(service: InferenceService, host: str, port: int) -> int:
    """Serves `service` until stopped (0) or until its engine's step loop dies (EXIT_ENGINE_DIED).

    An engine that could not step never steps again (a CUDA error leaves the device unusable to
    this process): answering 503 until someone looks serves nobody. So the server stops once
    every open stream has been handed the error, each ends with its error event as the server
    drains it, and the process exits, for `make run`'s supervisor or Docker's restart policy to
    start a fresh one (vLLM's server does the same).
    """
    server = uvicorn.Server(uvicorn.Config(create_app(service), host=host, port=port,
                                           log_level="info", timeout_keep_alive=30))

    def stop_serving() -> None:  # on the step thread: the server reads the flag on its own loop
        logger.error("the engine's step loop died: this service stops, to be started afresh")
        server.should_exit = True

    service.when_engine_dies(stop_serving)
    server.run()
    return EXIT_ENGINE_DIED if service.async_engine is not None and service.async_engine.error else 0


def app_from_env() -> Starlette:
    return create_app(InferenceService(InferenceConfig.from_env()))
