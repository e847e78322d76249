"""The OpenAI-compatible HTTP API of the embedded model: a thin layer over :class:`.service.ChatService`.

Routes:

* ``POST /v1/chat/completions`` — ``n`` choices, ``stream`` (server-sent events in OpenAI's chunk
  format: ``delta.content`` while text is sampled, ``delta.tool_calls`` with ``index``, ``id``,
  name and arguments once a call is complete, ``finish_reason``, a usage chunk with
  ``stream_options.include_usage``, then ``data: [DONE]``), ``tools`` with ``tool_choice``
  ``auto`` / ``none`` / ``required`` / a named function (sampled under the tool-call grammar:
  ``required`` and named force one call, ``auto`` lets the model answer in text but makes any call
  it opens well-formed), ``usage``.
* ``POST /v1/responses`` — the Responses API subset that clients such as AgentRL's
  ``agentrl-eval`` use (:mod:`.responses`): ``input`` items (messages, ``function_call``,
  ``function_call_output``), ``instructions``, function ``tools``, ``tool_choice``,
  ``max_output_tokens``, ``temperature``, ``top_p``, ``truncation``; not streamed, never stored.
* ``GET /v1/models``, ``GET /health``.

What is not supported is refused with HTTP 400 and says so (``logprobs``, ``stop``,
``response_format`` other than text, ``previous_response_id``, streaming responses...). Every
error leaves as ``{"detail", "error", "data"}`` (see :mod:`agentrl_envs.transport.answers`).

Defaults follow OpenAI's: ``temperature`` 1.0, ``top_p`` 1.0. The request's ``model`` field is not
checked (every name is served by the one loaded model, whose name the response carries). The
completion budget is capped as the service documents (context window, ``--max-tokens-limit``,
wall-time and repetition guards).

Run it with ``python -m agentrl_envs.models.server [--host H] [--port P] [--model PATH] ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from ..chat.engine import ChatGeneration
from ..chat.errors import BadModelRequestError
from ..errors import AgentRLEnvsError
from ..protocol.openai import (
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChoiceDelta,
    ChunkChoice,
    Message,
    ModelCard,
    ModelList,
    ResponsesRequest,
    StreamError,
    StreamErrorDetail,
    ToolCallDelta,
    ToolDefinition,
    Usage,
)
from ..transport.answers import json_response
from ..transport.routes import install_error_handlers
from . import responses
from .launch import SERVER_ERROR, add_server_arguments
from .service import StreamDelta

log = logging.getLogger(__name__)

MAX_N = 16


class ChatBackend(Protocol):
    """What the app needs (:class:`.service.ChatService` is one)."""

    name: str

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None, **kwargs: Any
    ) -> list[ChatGeneration]: ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None, **kwargs: Any
    ) -> AsyncIterator[StreamDelta]: ...


_UNSUPPORTED = {
    "logprobs": "logprobs are not returned by the built-in model server",
    "top_logprobs": "logprobs are not returned by the built-in model server",
    "stop": "stop sequences are not supported by the built-in model server; the model stops at its end-of-turn token",
    "logit_bias": "logit_bias is not supported by the built-in model server",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
}


def _check(req: ChatCompletionRequest) -> None:
    extra = req.model_extra or {}
    for key, why in _UNSUPPORTED.items():
        if extra.get(key) not in (None, False, [], {}):
            raise BadModelRequestError(why, param=key)
    fmt = extra.get("response_format")
    if fmt not in (None, {"type": "text"}):
        raise BadModelRequestError("response_format other than text is not supported", param="response_format")
    if not 1 <= req.n <= MAX_N:
        raise BadModelRequestError(f"n must be between 1 and {MAX_N}, got {req.n}", param="n")
    if not req.messages:
        raise BadModelRequestError("messages is empty", param="messages")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise BadModelRequestError(f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
    if req.temperature is not None and not 0 <= req.temperature <= 2:
        raise BadModelRequestError(f"temperature must be in [0, 2], got {req.temperature}", param="temperature")
    if req.top_p is not None and not 0 < req.top_p <= 1:
        raise BadModelRequestError(f"top_p must be in (0, 1], got {req.top_p}", param="top_p")
    if req.tool_choice not in (None, "auto", "none", "required") and not (
        isinstance(req.tool_choice, dict) and (req.tool_choice.get("function") or {}).get("name")
    ):
        raise BadModelRequestError(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if req.tool_choice not in (None, "auto", "none") and not req.tools:
        raise BadModelRequestError("tool_choice forces a tool call but no tools were given", param="tool_choice")


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def create_app(backend: ChatBackend, *, served_model_name: str | None = None) -> FastAPI:
    """The FastAPI app serving ``backend`` (already loaded: ``/health`` answers ok at once)."""
    model_name = served_model_name or backend.name
    created = int(time.time())
    app = FastAPI(title="agentrl-envs model server", version="1")
    install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        return json_response({"status": "ok", "model": model_name})

    @app.get("/v1/models")
    async def models() -> Response:
        return json_response(ModelList(data=[ModelCard(id=model_name, created=created)]).model_dump(mode="json"))

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> Response:
        _check(req)
        tools = None if req.tool_choice == "none" else req.tools
        kwargs = {
            "max_tokens": req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "seed": req.seed,
            "tool_choice": req.tool_choice if tools else None,
            "n": req.n,
        }
        completion_id = "chatcmpl-" + uuid.uuid4().hex
        if req.stream:
            include_usage = bool((req.stream_options or {}).get("include_usage"))
            deltas = backend.stream(req.messages, tools, **kwargs)
            first = await anext(deltas)  # errors before the first token (e.g. context length) stay HTTP errors
            return StreamingResponse(
                _chat_chunks(first, deltas, completion_id, model_name, req.n, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        generations = await backend.complete(req.messages, tools, **kwargs)
        prompt_tokens = generations[0].usage.prompt_tokens  # the prompt once, every completion
        completion_tokens = sum(g.usage.completion_tokens for g in generations)
        body = ChatCompletionResponse(
            id=completion_id,
            created=int(time.time()),
            model=model_name,
            choices=[
                ChatCompletionChoice(index=i, message=ChatCompletionMessage.of(g.message), finish_reason=g.finish_reason)
                for i, g in enumerate(generations)
            ],
            usage=Usage(
                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
            ),
        )
        return json_response(body.model_dump(mode="json"))

    @app.post("/v1/responses")
    async def create_response(req: ResponsesRequest) -> Response:
        messages, tools, tool_choice = responses.to_chat(req)
        max_tokens = req.max_output_tokens
        if req.truncation == "auto":
            messages = await responses.truncate(backend, messages, tools, tool_choice)
        [generation] = await backend.complete(
            messages,
            tools,
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            tool_choice=tool_choice,
        )
        return json_response(responses.to_response(req, generation, model_name).model_dump(mode="json"))

    return app


async def _chat_chunks(
    first: StreamDelta, deltas: AsyncIterator[StreamDelta], completion_id: str, model: str, n: int, include_usage: bool
) -> AsyncIterator[bytes]:
    created = int(time.time())

    def event(choices: list[ChunkChoice], usage: Usage | None = None) -> bytes:
        chunk = ChatCompletionChunk(id=completion_id, created=created, model=model, choices=choices, usage=usage)
        return _sse(chunk.model_dump(mode="json"))

    def chunk(index: int, delta: ChoiceDelta, finish_reason: str | None = None) -> bytes:
        return event([ChunkChoice(index=index, delta=delta, finish_reason=finish_reason)])

    for i in range(n):  # OpenAI opens every choice with its role
        yield chunk(i, ChoiceDelta(role="assistant", content=""))
    calls_sent = [0] * n

    async def rest() -> AsyncIterator[StreamDelta]:
        yield first
        async for d in deltas:
            yield d

    try:
        async for d in rest():
            if d.usage is not None:
                if include_usage:
                    yield event([], d.usage)
            elif d.content:
                yield chunk(d.index, ChoiceDelta(content=d.content))
            elif d.tool_calls:
                for call in d.tool_calls:
                    k = calls_sent[d.index]
                    calls_sent[d.index] += 1
                    head = ToolCallDelta(
                        index=k, id=call.id, type="function", function={"name": call.function.name, "arguments": ""}
                    )
                    yield chunk(d.index, ChoiceDelta(tool_calls=[head]))
                    args = ToolCallDelta(index=k, function={"arguments": call.function.arguments})
                    yield chunk(d.index, ChoiceDelta(tool_calls=[args]))
            elif d.finish_reason is not None:
                yield chunk(d.index, ChoiceDelta(), d.finish_reason)
    except Exception as e:  # headers are gone: the error travels as an event, as OpenAI does
        log.exception("streaming failed")
        code = getattr(e, "code", "internal_error")
        yield _sse(StreamError(error=StreamErrorDetail(message=str(e), type=code, code=code)).model_dump(mode="json"))
    yield b"data: [DONE]\n\n"


# ---------------------------------------------------------------------- running it


def serve_model(
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str | None = None,
    *,
    served_model_name: str | None = None,
    num_threads: int | None = None,
    dtype: str = "float32",
    log_level: str = "info",
    fd: int | None = None,
    **service_options: Any,
) -> None:
    """Load the model, then serve the OpenAI API with uvicorn until interrupted (blocking).

    ``service_options`` go to :class:`.service.ChatService` (``max_batch``: requests decoded
    together; the budget caps and guards). ``/health`` answers only after the model is loaded, so
    its answer means ready. ``fd``: serve on this inherited listening socket (``--fd N``, as
    :class:`.launch.LocalModelServer` starts it) instead of binding ``host:port``; a health check
    sent while the model loads waits in its backlog.
    """
    import torch
    import uvicorn

    from ..chat.engine import TransformersEngine
    from ..transport.serve import serve_config
    from .service import ChatService

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Only the sampler's thread runs multi-threaded torch ops (see chat/sampling.py): measured on
    # 2 cores, a parallel op took 72-98 us on a second thread once the main thread had its own
    # OpenMP workers, 22 us when it had none. So the main thread loads the model on one core.
    torch.set_num_threads(1)
    engine = TransformersEngine(model, num_threads=num_threads, dtype=dtype)
    log.info("model %s loaded in %.1f s; serving on http://%s:%d/v1", engine.name, engine.load_seconds, host, port)
    service = ChatService(engine, **service_options)
    try:
        app = create_app(service, served_model_name=served_model_name)
        serve_config(uvicorn.Config(app, host=host, port=port, log_level=log_level), fd)
    finally:
        service.close()


def serve_from_args(a: argparse.Namespace) -> None:
    """Serve with the flags of :func:`add_server_arguments` (blocking)."""
    from .server import serve_model

    serve_model(
        a.host,
        a.port,
        model=a.model,
        served_model_name=a.served_model_name,
        dtype=a.dtype,
        log_level=a.log_level,
        fd=a.fd,
        max_batch=a.max_batch,
        default_max_tokens=a.default_max_tokens,
        max_tokens_limit=a.max_tokens_limit,
        max_request_seconds=a.max_request_seconds,
        repetition_window=a.repetition_window,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentrl_envs.models.server``: load the model, then serve until interrupted.

    An error the package knows the fix for ends the process with one line (``SERVER_ERROR`` and
    the message) and exit status 2, not a traceback."""
    p = argparse.ArgumentParser(prog="python -m agentrl_envs.models.server", description=__doc__.split("\n")[0])
    add_server_arguments(p)
    try:
        serve_from_args(p.parse_args(argv))
    except AgentRLEnvsError as e:
        print(SERVER_ERROR + e.message, file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
