"""What the HTTP layers (worker, controller) share: one error shape and fast JSON responses.

Every error leaves as ``{"detail": str, "error": code, "data": {...}}`` (:class:`schema.ErrorBody`)
with the status code of its exception class; a body that fails validation is a 422 whose detail
names the offending field.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from .errors import AgentRLEnvsError

log = logging.getLogger(__name__)


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, headers=headers, media_type="application/json")


def error_response(status_code: int, code: str, detail: str, data: dict[str, Any] | None = None) -> Response:
    return json_response({"detail": detail, "error": code, "data": data or {}}, status_code)


def _validation_detail(errors: list[Any]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg')}")
    return "invalid request body: " + "; ".join(parts)


def parse_body(model: type[BaseModel], raw: bytes) -> Any:
    """Validate a raw JSON body (pydantic's Rust parser: faster than FastAPI's own path)."""
    return model.model_validate_json(raw or b"null")


def service_app(title: str, service: Any) -> FastAPI:
    """A FastAPI app whose lifespan runs ``service.startup()`` / ``service.shutdown()``."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.startup()
        try:
            yield
        finally:
            await service.shutdown()

    app = FastAPI(title=title, lifespan=lifespan)
    app.state.service = service
    install_error_handlers(app)
    return app


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AgentRLEnvsError)
    async def _known(_: Request, exc: AgentRLEnvsError) -> Response:
        return error_response(exc.http_status, exc.code, exc.message, exc.data)

    @app.exception_handler(ValidationError)
    async def _invalid(_: Request, exc: ValidationError) -> Response:
        return error_response(422, "invalid_request", _validation_detail(exc.errors()))

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_: Request, exc: RequestValidationError) -> Response:
        return error_response(422, "invalid_request", _validation_detail(list(exc.errors())))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}")


FastHandler = Callable[[dict[bytes, bytes], bytes], Awaitable[Any]]


class WithHeaders:
    """What a fast handler returns to add response headers to its JSON body."""

    __slots__ = ("body", "headers")

    def __init__(self, body: Any, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


class FastRoutes:
    """An ASGI front that serves a few hot routes without FastAPI's routing and middleware stack.

    Profiling the controller under load showed 60% of its CPU per step in that stack. A handler
    gets the request headers and raw body and returns a JSON-able value; errors leave in the
    same shape and with the same status codes as from the FastAPI handlers. Every other request
    (and lifespan) goes to the wrapped app, whose own routes document the fast ones.
    """

    def __init__(self, app: FastAPI, routes: dict[tuple[str, str], FastHandler]) -> None:
        self.app = app
        self.state = app.state
        self.routes = routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        handler = self.routes.get((scope.get("method", ""), scope.get("path", ""))) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        status = 200
        extra: list[tuple[bytes, bytes]] = []
        try:
            result = await handler(dict(scope["headers"]), b"".join(chunks))
            if type(result) is WithHeaders:
                extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in result.headers.items()]
                result = result.body
            payload = orjson.dumps(result)
        except AgentRLEnvsError as e:
            status, payload = e.http_status, orjson.dumps({"detail": e.message, "error": e.code, "data": e.data})
        except ValidationError as e:
            status, payload = (
                422,
                orjson.dumps({"detail": _validation_detail(e.errors()), "error": "invalid_request", "data": {}}),
            )
        except Exception as e:
            log.exception("unhandled error on %s", scope["path"], exc_info=e)
            status, payload = 500, orjson.dumps({"detail": f"{type(e).__name__}: {e}", "error": "internal_error", "data": {}})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
