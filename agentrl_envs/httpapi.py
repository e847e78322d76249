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

from .errors import AgentRLEnvsError, InternalError, InvalidRequestError, OverloadedError

log = logging.getLogger(__name__)


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, headers=headers, media_type="application/json")


def error_payload(err: AgentRLEnvsError) -> bytes:
    """The one error body (:class:`schema.ErrorBody`), serialised: every error leaves through here."""
    return orjson.dumps({"detail": err.message, "error": err.code, "data": err.data})


def as_wire_error(exc: BaseException, where: str = "") -> AgentRLEnvsError:
    """Any exception as the error the wire carries: ours as they are, a validation failure as
    :class:`InvalidRequestError`, anything else as :class:`InternalError` (logged: a bug)."""
    if isinstance(exc, AgentRLEnvsError):
        return exc
    if isinstance(exc, (ValidationError, RequestValidationError)):
        return InvalidRequestError(_validation_detail(list(exc.errors())))
    log.exception("unhandled error%s", f" on {where}" if where else "", exc_info=exc)
    return InternalError(f"{type(exc).__name__}: {exc}")


def error_response(exc: BaseException) -> Response:
    err = as_wire_error(exc)
    return Response(error_payload(err), status_code=err.http_status, media_type="application/json")


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
    async def handle(_: Request, exc: Exception) -> Response:
        return error_response(exc)

    for kind in (AgentRLEnvsError, ValidationError, RequestValidationError, Exception):
        app.add_exception_handler(kind, handle)


FastHandler = Callable[[dict[bytes, bytes], bytes], Awaitable[Any]]


class WithHeaders:
    """What a fast handler returns to add response headers to its JSON body."""

    __slots__ = ("body", "headers")

    def __init__(self, body: Any, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


async def run_fast_handler(
    handler: FastHandler, headers: dict[bytes, bytes], body: bytes, where: str
) -> tuple[int, dict[str, str], bytes]:
    """Run a fast route's handler: ``(status, extra response headers, JSON payload)``, errors in
    the one error shape. Shared by the ASGI front and the protocol that serves these routes."""
    try:
        result = await handler(headers, body)
        if type(result) is WithHeaders:
            return 200, result.headers, orjson.dumps(result.body)
        return 200, {}, orjson.dumps(result)
    except Exception as e:
        err = as_wire_error(e, where)
        return err.http_status, {}, error_payload(err)


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
        status, extra, payload = await run_fast_handler(handler, dict(scope["headers"]), b"".join(chunks), scope["path"])
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


# --------------------------------------------------------------------------- serving


def raise_fd_limit(reserve: int) -> int:
    """Raise the soft limit on open files to the hard one; return how many client connections to
    admit, keeping ``reserve`` descriptors (at most a quarter) for everything else."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, soft - min(reserve, soft // 4))


def tune_gc_for_serving() -> None:
    """Freeze what start-up allocated (modules, app, schemas) out of the collector's sight and
    collect the young generation less often. Measured with benchmarks/session_scale.py on one
    core: the worker's CPU per step at 10,000 sessions went from ~195 µs to ~140 µs (at 64
    sessions from ~148 µs to ~132 µs): full collections over 10,000 sessions' objects were a
    quarter of the time."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def _status_line(status: int) -> bytes:
    from http import HTTPStatus

    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def http_protocol(max_connections: int, routes: dict[tuple[str, str], FastHandler] | None = None) -> type:
    """uvicorn's httptools protocol with two additions, for thousands of agent connections:

    * **Fast routes**: a request for one of ``routes`` (the hot ``start_sample`` / ``interact``)
      is answered by its handler straight from the protocol (headers and body in, JSON out),
      without uvicorn's ASGI cycle (scope, request/response objects, receive/send): measured with
      benchmarks/session_scale.py, that cycle was ~40% of the controller's CPU per step. Every
      other request, and lifespan, goes through the ASGI app as usual. Errors leave in the one
      error shape. A fast route does not take pipelined requests (no agent client sends them):
      a request sent before the previous answer is refused with 400 and the connection closed.
    * **The multiplexed transport** (:mod:`agentrl_envs.mux`): ``GET {prefix}/mux`` with
      ``Upgrade: agentrl-mux`` turns the connection into one that carries many requests for the
      fast ``POST`` routes under ``{prefix}`` at once (the controller's hop to its workers).
    * **A connection limit**: connections past ``max_connections`` get a 503 ``overloaded`` and
      a close at once, instead of failing to be accepted when the process runs out of file
      descriptors (the client would hang in the listen backlog). uvicorn's own
      ``limit_concurrency`` counts requests in flight too, which at 10,000 keep-alive sessions
      legitimately run past the connection count.
    """
    from urllib.parse import unquote

    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from . import mux

    routes = routes or {}
    refusal_body = error_payload(
        OverloadedError(
            f"this server is at its limit of {max_connections} connections (set by `ulimit -n`); retry later",
            max_connections=max_connections,
        )
    )
    refusal = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n" % len(refusal_body) + refusal_body
    )
    ok_head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "

    class AgentHttpProtocol(HttpToolsProtocol):
        _fast: FastHandler | None = None
        _fast_busy = False
        _refused = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                log.warning("connection refused: %d connections open (limit %d)", len(self.connections), max_connections)
                self._refused = True
                transport.write(refusal)
                transport.close()
                return
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._refused:
                super().connection_lost(exc)

        # The scope is built only for requests that go to the ASGI app.
        def on_message_begin(self) -> None:
            self.url = b""
            self.headers = []
            self.expect_100_continue = False
            self._fast = None

        def on_headers_complete(self) -> None:
            method = self.parser.get_method().decode("ascii")
            path = httptools.parse_url(self.url).path.decode("ascii")
            handler = routes.get((method, unquote(path) if "%" in path else path))
            if handler is not None and not self.parser.should_upgrade():
                if self._fast_busy:
                    self.send_400_response("HTTP pipelining is not supported here: wait for each answer")
                    return
                self._fast, self._fast_body = handler, []
                return
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            super().on_message_begin()  # builds the ASGI scope, resets url and headers
            self.url, self.expect_100_continue = url, expect
            self.headers.extend(headers)  # the scope holds this very list
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self._fast is not None:
                self._fast_body.append(body)
            elif not self.transport.is_closing():
                super().on_body(body)

        def on_message_complete(self) -> None:
            handler = self._fast
            if handler is None:
                if not self.transport.is_closing():
                    super().on_message_complete()
                return
            self._fast = None
            self._fast_busy = True  # no pause_reading: a request before the answer is refused anyway
            keep_alive = self.parser.should_keep_alive()
            task = self.loop.create_task(self._answer(handler, dict(self.headers), b"".join(self._fast_body), keep_alive))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

        async def _answer(self, handler: FastHandler, headers: dict[bytes, bytes], body: bytes, keep_alive: bool) -> None:
            status, headers_out, payload = await run_fast_handler(handler, headers, body, self.url.decode("latin-1", "replace"))
            head = ok_head if status == 200 else _status_line(status) + b"content-type: application/json\r\ncontent-length: "
            extra = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers_out.items())
            self._fast_busy = False
            if self.transport.is_closing():
                return
            keep_alive = keep_alive and not self._shutting_down
            close = b"" if keep_alive else b"connection: close\r\n"
            self.transport.write(b"%s%d\r\n%s%s\r\n%s" % (head, len(payload), extra, close, payload))
            if keep_alive:
                self.on_response_complete()  # keep-alive timer, resume reading
            else:
                self.transport.close()

        # The multiplexed transport: an upgrade on the fast routes' prefix.
        def _mux_routes(self) -> dict[bytes, mux.MuxHandler]:
            path = httptools.parse_url(self.url).path.decode("ascii", "replace")
            if self.parser.get_method() != b"GET" or not path.endswith(mux.PATH):
                return {}
            prefix = path[: -len(mux.PATH)] + "/"
            return {
                route[len(prefix) :].encode(): _mux_handler(handler, route)
                for (method, route), handler in routes.items()
                if method == "POST" and route.startswith(prefix) and "/" not in route[len(prefix) :]
            }

        def _should_upgrade(self) -> bool:
            if self._get_upgrade() == mux.UPGRADE_TOKEN:
                return bool(self._mux_routes())
            return super()._should_upgrade()

        def handle_websocket_upgrade(self) -> None:
            if self._get_upgrade() != mux.UPGRADE_TOKEN:
                super().handle_websocket_upgrade()
                return
            served = self._mux_routes()
            self.connections.discard(self)  # the multiplexed protocol takes its place
            if self.timeout_keep_alive_task is not None:
                self.timeout_keep_alive_task.cancel()
                self.timeout_keep_alive_task = None
            self.transport.write(mux.upgrade_answer(sorted(p.decode() for p in served)))
            self.transport.set_protocol(mux.MuxServer(served, self.transport, self.tasks, self.connections))

        _shutting_down = False

        def shutdown(self) -> None:
            if self._fast_busy:
                self._shutting_down = True  # close once the answer is written
            else:
                super().shutdown()

    return AgentHttpProtocol


def _mux_handler(handler: FastHandler, where: str) -> Any:
    async def serve(body: bytes) -> tuple[int, bytes]:
        status, _, payload = await run_fast_handler(handler, {}, body, where)
        return status, payload

    return serve


def run_server(app: Any, host: str, port: int, log_level: str, *, reserve_fds: int = 512) -> None:
    """Serve ``app`` with uvicorn, set up for thousands of keep-alive agent connections."""
    import uvicorn

    connections = raise_fd_limit(reserve_fds)
    print(f"admitting up to {connections} connections (then 503; raise `ulimit -n` for more)", flush=True)
    tune_gc_for_serving()
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http=http_protocol(connections, app.routes if isinstance(app, FastRoutes) else None),
        timeout_keep_alive=75,
        # Thousands of agents connect at once when a run starts; the kernel caps this at
        # net.core.somaxconn.
        backlog=16384,
        # Nothing sits in front of these servers; the headers cost CPU on every response.
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )
