"""What the HTTP layers (worker, controller) share: one error shape and fast JSON responses.

Every error leaves as ``{"detail": str, "error": code, "data": {...}}`` (:class:`schema.ErrorBody`)
with the status code of its exception class; a body that fails validation is a 422 whose detail
names the offending field.

Every route but ``/health`` asks for a token when the app's :class:`~agentrl_envs.auth.Authenticator`
has any (:class:`FastRoutes` for requests through ASGI, the protocol itself for the fast routes and
the multiplexed upgrade), and the protocol refuses what no route should see (:class:`HttpLimits`):
oversized bodies (413), header floods (431) and requests read too slowly (408, slow-loris).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from .errors import (
    AgentRLEnvsError,
    HeadersTooLargeError,
    InternalError,
    InvalidRequestError,
    OverloadedError,
    RequestRejectedError,
    RequestTimeoutError,
    RequestTooLargeError,
)
from .transport.auth import ADMIN, OPEN_PATHS, Authenticator

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


# A fast route's handler: the request's headers and raw body in; out, its JSON-able answer (or a
# WithHeaders), either at once or as an awaitable of it: a coroutine (run as a task) or a future
# (answered from its done-callback, no task: the controller's step on a multiplexed worker
# connection, see ControllerService.begin_interact). Errors are raised, at once or through the
# awaitable, and leave in the one error shape.
FastHandler = Callable[[dict[bytes, bytes], bytes], Any]


class WithHeaders:
    """What a fast handler returns to add response headers to its JSON body."""

    __slots__ = ("body", "headers")

    def __init__(self, body: Any, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


Answer = tuple[int, dict[str, str], bytes]  # status, extra response headers, JSON payload


def encode_answer(result: Any) -> Answer:
    if type(result) is WithHeaders:
        return 200, result.headers, orjson.dumps(result.body)
    return 200, {}, orjson.dumps(result)


def encode_failure(exc: BaseException, where: str) -> Answer:
    err = as_wire_error(exc, where)
    return err.http_status, {}, error_payload(err)


def settled(fut: asyncio.Future[Any], where: str) -> Answer:
    """The answer of a done future (a cancelled one is an internal error: nothing should cancel it)."""
    if fut.cancelled():
        return encode_failure(InternalError("the request was cancelled"), where)
    exc = fut.exception()
    if exc is not None:
        return encode_failure(exc, where)
    try:
        return encode_answer(fut.result())
    except Exception as e:  # not serialisable: a bug, reported as one
        return encode_failure(e, where)


async def run_fast_handler(handler: FastHandler, headers: dict[bytes, bytes], body: bytes, where: str) -> Answer:
    """Run a fast route's handler to its answer, errors in the one error shape. Shared by the
    ASGI front and the multiplexed transport."""
    try:
        result = handler(headers, body)
        if hasattr(result, "__await__"):
            result = await result
        return encode_answer(result)
    except Exception as e:
        return encode_failure(e, where)


def _authorization(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            return value
    return None


class FastRoutes:
    """An ASGI front that serves a few hot routes without FastAPI's routing and middleware stack.

    Profiling the controller under load showed 60% of its CPU per step in that stack. A handler
    (:data:`FastHandler`) gets the request headers and raw body and returns a JSON-able value, at
    once or as an awaitable of it; errors leave in the same shape and with the same status codes
    as from the FastAPI handlers. Every other request (and lifespan) goes to the wrapped app,
    whose own routes document the fast ones.

    It also checks every request's token (``auth``) against the role its path needs
    (``roles[path]``, else ``default_role``: a route added later is guarded, never open by
    omission); ``/health`` is open. The checked principal rides in ``scope["principal"]``.
    """

    def __init__(
        self,
        app: FastAPI,
        routes: dict[tuple[str, str], FastHandler],
        *,
        auth: Authenticator | None = None,
        roles: dict[str, str] | None = None,
        default_role: str = ADMIN,
    ) -> None:
        self.app = app
        self.state = app.state
        self.routes = routes
        self.auth = auth or Authenticator()
        self.roles = roles or {}
        self.default_role = default_role

    def role_of(self, path: str) -> str | None:
        """The role a request for ``path`` needs; None for an open path."""
        return None if path in OPEN_PATHS else self.roles.get(path, self.default_role)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        role = self.role_of(path)
        if role is not None and self.auth.enabled:
            try:
                scope["principal"] = self.auth.check(_authorization(scope["headers"]), role)
            except AgentRLEnvsError as e:
                await _send_error(send, e)
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
        status, extra, payload = await run_fast_handler(handler, dict(scope["headers"]), b"".join(chunks), scope["path"])
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


_CHALLENGE = b'www-authenticate: Bearer realm="agentrl", Basic realm="agentrl"\r\n'


async def _send_error(send: Any, err: AgentRLEnvsError) -> None:
    payload = error_payload(err)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if err.http_status == 401:
        headers.append((b"www-authenticate", _CHALLENGE[len(b"www-authenticate: ") : -2]))
    await send({"type": "http.response.start", "status": err.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


# --------------------------------------------------------------------------- serving


@dataclass(frozen=True)
class HttpLimits:
    """What the protocol refuses before any route sees it (each with a clear 4xx and a close)."""

    max_body: int = 64 << 20  # bytes of one request body (413); a custom_task may carry data
    max_header_bytes: int = 64 << 10  # request line + headers (431)
    max_headers: int = 128  # header lines (431)
    read_timeout: float = 60.0  # seconds to receive one whole request once it begins, or the first (408)


class _Reject(Exception):
    """Raised from a parser callback: answer ``error`` and close the connection."""

    def __init__(self, error: AgentRLEnvsError) -> None:
        super().__init__(error.message)
        self.error = error


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


def http_protocol(
    max_connections: int,
    routes: dict[tuple[str, str], FastHandler] | FastRoutes | None = None,
    *,
    limits: HttpLimits | None = None,
) -> type:
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
    * **Authentication and limits**: given the app's :class:`FastRoutes` (``routes``), a fast
      route or the multiplexed upgrade is refused (401/403, then a close) unless its
      ``authorization`` header passes the app's :class:`~agentrl_envs.auth.Authenticator`, checked
      before the body is read (a dict lookup and ``compare_digest`` on the raw header bytes);
      :class:`HttpLimits` bound body size, headers and the time to read a request.
    """
    from asyncio import isfuture
    from functools import partial
    from types import CoroutineType
    from urllib.parse import unquote

    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from .transport import mux

    limits = limits or HttpLimits()
    max_body, max_header_bytes, max_headers = limits.max_body, limits.max_header_bytes, limits.max_headers
    front = routes if isinstance(routes, FastRoutes) else None
    routes = front.routes if front is not None else (routes or {})
    auth = front.auth if front is not None and front.auth.enabled else None
    # (method, path) of each fast route -> (handler, role it needs)
    fast = {key: (handler, front.role_of(key[1]) if front is not None else None) for key, handler in routes.items()}
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
        _head_bytes = 0
        _body_bytes = 0
        _read_timer: Any = None
        _reading_since: float | None = None  # loop time the request being read began; None between requests
        _authz: bytes | None = None  # this request's authorization header

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                log.warning("connection refused: %d connections open (limit %d)", len(self.connections), max_connections)
                self._refused = True
                transport.write(refusal)
                transport.close()
                return
            super().connection_made(transport)
            self._reading_since = self.loop.time()  # the first request is due from now
            self._read_timer = self.loop.call_later(limits.read_timeout, self._check_read_time)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_read_timer()
            if not self._refused:
                super().connection_lost(exc)

        # Slow-loris: a request (or a new connection's first) must arrive whole within
        # read_timeout. One timer per connection, re-armed only when it fires: a request only
        # notes when it began (a timer per request cost ~0.6 µs a step).
        def _check_read_time(self) -> None:
            self._read_timer = None
            if self.transport.is_closing():
                return
            delay = limits.read_timeout
            if self._reading_since is not None:
                late = self.loop.time() - self._reading_since
                if late >= limits.read_timeout:
                    self._reject(RequestTimeoutError(f"the request was not received within {limits.read_timeout:g} s"))
                    return
                delay -= late
            self._read_timer = self.loop.call_later(delay, self._check_read_time)

        def _disarm_read_timer(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _reject(self, err: AgentRLEnvsError) -> None:
            """Answer ``err`` in the one error shape and close: the rest of the request is not read."""
            self._disarm_read_timer()
            if self.transport.is_closing():
                return
            payload = error_payload(err)
            challenge = _CHALLENGE if err.http_status == 401 else b""
            self.transport.write(
                _status_line(err.http_status)
                + challenge
                + b"content-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(payload)
                + payload
            )
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserCallbackError as e:
                cause = e.__context__
                self._reject(cause.error if isinstance(cause, _Reject) else InvalidRequestError("invalid HTTP request"))
            except httptools.HttpParserError:
                self._reject(InvalidRequestError("invalid HTTP request"))
            except httptools.HttpParserUpgrade:
                self._disarm_read_timer()
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()

        # The scope is built only for requests that go to the ASGI app.
        def on_message_begin(self) -> None:
            self.url = b""
            self.headers = []
            self.expect_100_continue = False
            self._fast = None
            self._head_bytes = self._body_bytes = 0
            self._authz = None
            self._reading_since = self.loop.time()

        def on_url(self, url: bytes) -> None:
            self._head_bytes += len(url)
            if self._head_bytes > max_header_bytes:
                raise _Reject(HeadersTooLargeError(f"the request line is over {max_header_bytes} bytes"))
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            # uvicorn's own (lower-cased name, trimmed value, Expect noted), inlined: a super()
            # call per header cost ~0.3 µs; the two headers this layer needs are noted as they pass.
            name = name.lower()
            value = value.rstrip(b" \t")
            self._head_bytes += len(name) + len(value)
            if self._head_bytes > max_header_bytes or len(self.headers) >= max_headers:
                raise _Reject(
                    HeadersTooLargeError(f"request headers over the limit ({max_headers} headers, {max_header_bytes} bytes)")
                )
            if name == b"authorization":
                self._authz = value
            elif name == b"content-length":
                if value.isdigit() and int(value) > max_body:
                    raise _Reject(RequestTooLargeError(f"the request body is over {max_body} bytes"))
            elif name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))

        def _check_head(self, role: str | None) -> None:
            """Refuse before the body is read: a missing or wrong token."""
            if auth is not None and role is not None:
                try:
                    auth.check(self._authz, role)
                except AgentRLEnvsError as e:
                    raise _Reject(e) from None

        def on_headers_complete(self) -> None:
            method = self.parser.get_method().decode("ascii")
            path = httptools.parse_url(self.url).path.decode("ascii")
            path = unquote(path) if "%" in path else path
            hit = fast.get((method, path))
            if hit is not None and not self.parser.should_upgrade():
                if self._fast_busy:
                    raise _Reject(RequestRejectedError("HTTP pipelining is not supported here: wait for each answer"))
                self._check_head(hit[1])
                self._fast, self._fast_body = hit[0], []
                return
            # The mux upgrade's token is checked in _should_upgrade (refused: a plain GET, 401).
            self._check_head(None if self.parser.should_upgrade() or front is None else front.role_of(path))
            url, headers, expect = self.url, self.headers, self.expect_100_continue
            super().on_message_begin()  # builds the ASGI scope, resets url and headers
            self.url, self.expect_100_continue = url, expect
            self.headers.extend(headers)  # the scope holds this very list
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            if self._body_bytes > max_body:
                raise _Reject(RequestTooLargeError(f"the request body is over {max_body} bytes"))
            if self._fast is not None:
                self._fast_body.append(body)
            elif not self.transport.is_closing():
                super().on_body(body)

        def on_message_complete(self) -> None:
            self._reading_since = None
            handler = self._fast
            if handler is None:
                if not self.transport.is_closing():
                    super().on_message_complete()
                return
            self._fast = None
            self._fast_busy = True  # no pause_reading: a request before the answer is refused anyway
            keep_alive = self.parser.should_keep_alive()
            try:
                result = handler(dict(self.headers), b"".join(self._fast_body))
            except Exception as e:
                self._respond(encode_failure(e, self._where()), keep_alive)
                return
            if type(result) is CoroutineType:
                task = self.loop.create_task(self._answer(result, keep_alive))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)
            elif isfuture(result):
                # Answered from the future's callback: no task (shutdown waits for it as for one).
                self.tasks.add(result)
                result.add_done_callback(partial(self._settled, keep_alive))
            else:
                self._respond(encode_answer(result), keep_alive)

        def _where(self) -> str:
            return self.url.decode("latin-1", "replace")

        async def _answer(self, pending: Any, keep_alive: bool) -> None:
            try:
                answer = encode_answer(await pending)
            except Exception as e:
                answer = encode_failure(e, self._where())
            self._respond(answer, keep_alive)

        def _settled(self, keep_alive: bool, fut: asyncio.Future[Any]) -> None:
            self.tasks.discard(fut)
            self._respond(settled(fut, self._where()), keep_alive)

        def _respond(self, answer: Answer, keep_alive: bool) -> None:
            status, headers_out, payload = answer
            head = ok_head if status == 200 else _status_line(status) + b"content-type: application/json\r\ncontent-length: "
            extra = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers_out.items()) if headers_out else b""
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
                if auth is not None and front is not None:
                    role = front.role_of(httptools.parse_url(self.url).path.decode("ascii", "replace"))
                    if role is not None:
                        p = auth.principal(self._authz)
                        if p is None or role not in p.roles:
                            return False  # then answered 401/403 as a plain GET
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


def run_server(
    app: Any,
    host: str,
    port: int,
    log_level: str,
    *,
    reserve_fds: int = 512,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    limits: HttpLimits | None = None,
) -> None:
    """Serve ``app`` with uvicorn, set up for thousands of keep-alive agent connections; HTTPS
    when given a certificate and its key (PEM files)."""
    import uvicorn

    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise AgentRLEnvsError("HTTPS needs both --ssl-certfile and --ssl-keyfile")
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
        http=http_protocol(connections, app if isinstance(app, FastRoutes) else None, limits=limits),
        timeout_keep_alive=75,
        # Thousands of agents connect at once when a run starts; the kernel caps this at
        # net.core.somaxconn.
        backlog=16384,
        # Nothing sits in front of these servers; the headers cost CPU on every response.
        proxy_headers=False,
        server_header=False,
        date_header=False,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
