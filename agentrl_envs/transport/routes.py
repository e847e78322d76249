"""A server's routes: the hot ones in a table of handlers, every other one in a FastAPI app.

:class:`FastRoutes` is the ASGI app a server runs (the controller's, a worker's). It holds:

* **the hot routes** (``start_sample``, ``interact``): ``(method, path) → handler``
  (:data:`~.answers.FastHandler`), served by :func:`~.answers.dispatch` without FastAPI's routing
  and middleware (most of the controller's CPU per step under load, docs/performance.md).
  The HTTP/1.1 protocol (:mod:`.http11`) answers them itself and carries them on its multiplexed
  connections (:mod:`.mux`); a hot request that reaches the ASGI app (a server other than ours, or
  ASGI middleware in front) is dispatched here the same way. FastAPI documents them in its
  OpenAPI schema (:func:`document`) but never serves them;
* **the one authentication check** (:meth:`FastRoutes.authorize`): the token a request carries
  against the role its path needs (``roles[path]``, else ``default_role``: a route added later is
  guarded, never open by omission; ``/health`` is open). The protocol runs it for every request
  before its body is read; the ASGI entry only for requests that did not come through the
  protocol. The principal it finds rides with the request: in a hot handler's headers under
  :data:`PRINCIPAL`, in an ASGI request's ``scope["principal"]``;
* **the FastAPI app** for every other route, with the one error shape (:func:`service_app`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import ValidationError

from ..errors import AgentRLEnvsError
from .answers import Answer, FastHandler, dispatch, error_payload, error_response
from .auth import ADMIN, OPEN_PATHS, Authenticator, Principal

# The header name under which a hot handler finds the request's principal (who sent it, as the
# check found it): a name no HTTP/1.1 header can have, so no client can send it.
PRINCIPAL = b":principal"

# Sent with every 401: how to send the token.
CHALLENGE = (b"www-authenticate", b'Bearer realm="agentrl", Basic realm="agentrl"')


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
    async def handle(_: Request, exc: Exception) -> Response:
        return error_response(exc)

    for kind in (AgentRLEnvsError, ValidationError, RequestValidationError, Exception):
        app.add_exception_handler(kind, handle)


def document(app: FastAPI, docs: APIRouter) -> None:
    """Add ``docs``' routes (the hot routes' request and response models) to ``app``'s OpenAPI
    schema without serving them: they are not among ``app``'s routes."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(
                title=app.title,
                version=app.version,
                openapi_version=app.openapi_version,
                description=app.description,
                routes=[*app.routes, *docs.routes],
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class FastRoutes:
    """The ASGI app of a server: its hot routes, its authentication, and its FastAPI ``app``.

    ``routes``: ``(method, path) → handler`` of the hot routes; ``auth``: the tokens (none: every
    route open, the loopback default); ``roles``: the role each path needs, else ``default_role``;
    ``docs``: the hot routes as FastAPI would declare them, for the OpenAPI schema only."""

    def __init__(
        self,
        app: FastAPI,
        routes: dict[tuple[str, str], FastHandler],
        *,
        auth: Authenticator | None = None,
        roles: dict[str, str] | None = None,
        default_role: str = ADMIN,
        docs: APIRouter | None = None,
    ) -> None:
        self.app = app
        self.state = app.state
        self.routes = routes
        self.auth = auth or Authenticator()
        self.roles = roles or {}
        self.default_role = default_role
        if docs is not None:
            document(app, docs)

    def role_of(self, path: str) -> str | None:
        """The role a request for ``path`` needs; None for an open path."""
        return None if path in OPEN_PATHS else self.roles.get(path, self.default_role)

    def authorize(self, authorization: bytes | None, role: str | None) -> Principal | None:
        """The one check: who a request with this ``authorization`` header is, if it may use a
        route of ``role`` (None: an open route, anyone may: then None if the header names no
        one). Raises :class:`~agentrl_envs.errors.AuthenticationError` (401) or
        :class:`~agentrl_envs.errors.ForbiddenError` (403). With no tokens configured everyone
        is the same principal (:data:`~.auth.ANONYMOUS`, or the one the quotas count against)."""
        if role is None or not self.auth.enabled:
            return self.auth.principal(authorization)
        return self.auth.check(authorization, role)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if "principal" not in scope:  # the protocol has not checked it (another server, or middleware)
            try:
                scope["principal"] = self.authorize(_authorization(scope["headers"]), self.role_of(path))
            except AgentRLEnvsError as e:
                await _send(send, e.http_status, {}, error_payload(e))
                return
        handler = self.routes.get((scope.get("method", ""), path))
        if handler is None:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        headers[PRINCIPAL] = scope["principal"]
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()

        def done(a: Answer) -> None:
            if not answer.done():  # not if the request was cancelled meanwhile (the client left)
                answer.set_result(a)

        dispatch(handler, headers, b"".join(chunks), path, done, loop, set())
        await _send(send, *await answer)


def _authorization(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            return value
    return None


async def _send(send: Any, status: int, extra: dict[str, str], payload: bytes) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
    ]
    if status == 401:
        headers.append(CHALLENGE)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
