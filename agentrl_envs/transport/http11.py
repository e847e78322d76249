"""The HTTP/1.1 server protocol of the controller and the workers: uvicorn's httptools protocol
with four additions, for thousands of agent connections.

* **Hot routes answered by the protocol itself**: a request for one of the app's hot routes
  (:class:`~.routes.FastRoutes`: ``start_sample``, ``interact``) is answered by its handler
  straight from the parser's callbacks (headers and body in, JSON out, :func:`~.answers.dispatch`),
  without uvicorn's ASGI cycle (scope, request/response objects, receive/send: measured with
  benchmarks/session_scale.py, a large share of the controller's CPU per step, see
  docs/performance.md). Every other request, and lifespan, goes through the ASGI app as usual.
  Errors leave in the one error shape. A hot route does not take pipelined requests (no agent
  client sends them): a request sent before the previous answer is refused with 400 and the
  connection closed.
* **The multiplexed transport** (:mod:`.mux`): ``GET {prefix}/mux`` with ``Upgrade: agentrl-mux``
  turns the connection into one that carries many requests for the hot ``POST`` routes under
  ``{prefix}`` at once (the controller's hop to its workers).
* **A connection limit**: connections past ``max_connections`` get a 503 ``overloaded`` and a
  close at once, instead of failing to be accepted when the process runs out of file descriptors
  (the client would hang in the listen backlog). uvicorn's own ``limit_concurrency`` counts
  requests in flight too, which at 10,000 keep-alive sessions legitimately run past the
  connection count.
* **Authentication and limits**: every request's ``authorization`` header goes through the app's
  one check (:meth:`~.routes.FastRoutes.authorize`) before its body is read; a refused one is
  answered 401/403 and the connection closed. :class:`HttpLimits` bound body size, headers and
  the time to read a request (413, 431, 408: slow-loris).

The protocol is :class:`AgentHttpProtocol`, configured by an :class:`HttpSettings`;
:func:`http_protocol` gives uvicorn the factory (``uvicorn.Config(http=...)``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import (
    AgentRLEnvsError,
    HeadersTooLargeError,
    InvalidRequestError,
    OverloadedError,
    RequestRejectedError,
    RequestTimeoutError,
    RequestTooLargeError,
)
from . import mux
from .answers import Answer, FastHandler, dispatch, error_payload
from .routes import CHALLENGE, PRINCIPAL, FastRoutes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpLimits:
    """What the protocol refuses before any route sees it (each with a clear 4xx and a close)."""

    max_body: int = 64 << 20  # bytes of one request body (413); a custom_task may carry data
    max_header_bytes: int = 64 << 10  # request line + headers (431)
    max_headers: int = 128  # header lines (431)
    read_timeout: float = 60.0  # seconds to receive one whole request once it begins, or the first (408)


class HttpSettings:
    """What one server's protocol instances share: its routes and their roles, its limits, and
    the answers it writes ready-made."""

    def __init__(self, max_connections: int, front: FastRoutes | None = None, limits: HttpLimits | None = None) -> None:
        self.max_connections = max_connections
        self.front = front
        self.limits = limits or HttpLimits()
        routes = front.routes if front is not None else {}
        # (method, path) of each hot route -> (handler, the role it needs)
        self.hot: dict[tuple[str, str], tuple[FastHandler, str | None]] = {
            key: (handler, front.role_of(key[1]) if front is not None else None) for key, handler in routes.items()
        }
        body = error_payload(
            OverloadedError(
                f"this server is at its limit of {max_connections} connections (set by `ulimit -n`); retry later",
                max_connections=max_connections,
            )
        )
        self.refusal = (
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body
        )

    def mux_routes(self, path: str) -> dict[bytes, tuple[FastHandler, str]]:
        """The hot ``POST`` routes a multiplexed upgrade at ``path`` (``{prefix}/mux``) serves,
        by their name under the prefix."""
        if not path.endswith(mux.PATH):
            return {}
        prefix = path[: -len(mux.PATH)] + "/"
        return {
            route[len(prefix) :].encode(): (handler, route)
            for (method, route), (handler, _) in self.hot.items()
            if method == "POST" and route.startswith(prefix) and "/" not in route[len(prefix) :]
        }


class _Reject(Exception):
    """Raised from a parser callback: answer ``error`` and close the connection."""

    def __init__(self, error: AgentRLEnvsError) -> None:
        super().__init__(error.message)
        self.error = error


_OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
_CHALLENGE_LINE = b"%s: %s\r\n" % CHALLENGE


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


class AgentHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the additions the module docstring lists (one instance
    per connection; ``settings`` shared by the server's)."""

    _hot: FastHandler | None = None  # the hot route of the request being read
    _hot_path = ""
    _hot_busy = False  # an answer is owed on this connection
    _keep_alive = True  # whether its request lets the connection go on
    _refused = False
    _shutting_down = False
    _head_bytes = 0
    _body_bytes = 0
    _read_timer: Any = None
    _reading_since: float | None = None  # loop time the request being read began; None between requests
    _authz: bytes | None = None  # this request's authorization header
    _principal: Any = None  # who sent it, by the one check

    def __init__(self, *args: Any, settings: HttpSettings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        limits = settings.limits
        # Read on every request: attributes of the instance, not of the settings.
        self._max_body, self._max_header_bytes, self._max_headers = limits.max_body, limits.max_header_bytes, limits.max_headers
        self._hot_routes = settings.hot
        self._front = settings.front

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        s = self.settings
        if len(self.connections) >= s.max_connections:
            log.warning("connection refused: %d connections open (limit %d)", len(self.connections), s.max_connections)
            self._refused = True
            transport.write(s.refusal)
            transport.close()
            return
        super().connection_made(transport)
        self._reading_since = self.loop.time()  # the first request is due from now
        self._read_timer = self.loop.call_later(s.limits.read_timeout, self._check_read_time)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_read_timer()
        if not self._refused:
            super().connection_lost(exc)

    # Slow-loris: a request (or a new connection's first) must arrive whole within read_timeout.
    # One timer per connection, re-armed only when it fires: a request only notes when it began
    # (a timer per request cost more, docs/performance.md).
    def _check_read_time(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        delay = timeout = self.settings.limits.read_timeout
        if self._reading_since is not None:
            late = self.loop.time() - self._reading_since
            if late >= timeout:
                self._reject(RequestTimeoutError(f"the request was not received within {timeout:g} s"))
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
        challenge = _CHALLENGE_LINE if err.http_status == 401 else b""
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

    # --------------------------------------------------------------- parser callbacks
    # The ASGI scope is built only for requests that go to the ASGI app.

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.expect_100_continue = False
        self._hot = None
        self._head_bytes = self._body_bytes = 0
        self._authz = None
        self._reading_since = self.loop.time()

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self._max_header_bytes:
            raise _Reject(HeadersTooLargeError(f"the request line is over {self._max_header_bytes} bytes"))
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's own (lower-cased name, trimmed value, Expect noted), inlined (a super() call
        # per header cost more); the two headers this layer needs are noted as they pass.
        name = name.lower()
        value = value.rstrip(b" \t")
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self._max_header_bytes or len(self.headers) >= self._max_headers:
            raise _Reject(
                HeadersTooLargeError(
                    f"request headers over the limit ({self._max_headers} headers, {self._max_header_bytes} bytes)"
                )
            )
        if name == b"authorization":
            self._authz = value
        elif name == b"content-length":
            if value.isdigit() and int(value) > self._max_body:
                raise _Reject(RequestTooLargeError(f"the request body is over {self._max_body} bytes"))
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        method = self.parser.get_method().decode("ascii")
        path = httptools.parse_url(self.url).path.decode("ascii")
        path = unquote(path) if "%" in path else path
        upgrade = self.parser.should_upgrade()
        hit = self._hot_routes.get((method, path))
        front = self._front
        # The app's one check, before the body is read: every request but an upgrade to another
        # protocol (a websocket's goes to the app as its own scope type).
        checked = front is not None and (not upgrade or self._get_upgrade() == mux.UPGRADE_TOKEN)
        if checked:
            role = hit[1] if hit is not None else front.role_of(path)  # type: ignore[union-attr]
            try:
                self._principal = front.authorize(self._authz, role)  # type: ignore[union-attr]
            except AgentRLEnvsError as e:
                raise _Reject(e) from None
        if hit is not None and not upgrade:
            if self._hot_busy:
                raise _Reject(RequestRejectedError("HTTP pipelining is not supported here: wait for each answer"))
            self._hot, self._hot_path, self._hot_body = hit[0], path, []
            return
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()  # builds the ASGI scope, resets url and headers
        self.url, self.expect_100_continue = url, expect
        self.headers.extend(headers)  # the scope holds this very list
        if checked:
            self.scope["principal"] = self._principal  # type: ignore[typeddict-unknown-key]
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._max_body:
            raise _Reject(RequestTooLargeError(f"the request body is over {self._max_body} bytes"))
        if self._hot is not None:
            self._hot_body.append(body)
        elif not self.transport.is_closing():
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._reading_since = None
        handler = self._hot
        if handler is None:
            if not self.transport.is_closing():
                super().on_message_complete()
            return
        self._hot = None
        self._hot_busy = True  # no pause_reading: a request before the answer is refused anyway
        headers = dict(self.headers)
        headers[PRINCIPAL] = self._principal
        self._keep_alive = self.parser.should_keep_alive()  # one hot request at a time: kept here
        dispatch(handler, headers, b"".join(self._hot_body), self._hot_path, self._respond, self.loop, self.tasks)

    def _respond(self, answer: Answer) -> None:
        status, headers_out, payload = answer
        head = _OK_HEAD if status == 200 else _status_line(status) + b"content-type: application/json\r\ncontent-length: "
        extra = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers_out.items()) if headers_out else b""
        self._hot_busy = False
        if self.transport.is_closing():
            return
        keep_alive = self._keep_alive and not self._shutting_down
        close = b"" if keep_alive else b"connection: close\r\n"
        self.transport.write(b"%s%d\r\n%s%s\r\n%s" % (head, len(payload), extra, close, payload))
        if keep_alive:
            self.on_response_complete()  # keep-alive timer, resume reading
        else:
            self.transport.close()

    # --------------------------------------------------------------- the multiplexed upgrade

    def _should_upgrade(self) -> bool:
        if self._get_upgrade() == mux.UPGRADE_TOKEN:
            # Its token passed the one check in on_headers_complete.
            return self.parser.get_method() == b"GET" and bool(self.settings.mux_routes(self._url_path()))
        return super()._should_upgrade()

    def _url_path(self) -> str:
        return httptools.parse_url(self.url).path.decode("ascii", "replace")

    def handle_websocket_upgrade(self) -> None:
        if self._get_upgrade() != mux.UPGRADE_TOKEN:
            super().handle_websocket_upgrade()
            return
        served = self.settings.mux_routes(self._url_path())
        self.connections.discard(self)  # the multiplexed protocol takes its place
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.transport.write(mux.upgrade_answer(sorted(p.decode() for p in served)))
        headers = {PRINCIPAL: self._principal}  # every request on it is the upgrading client's
        self.transport.set_protocol(mux.MuxServer(served, headers, self.transport, self.tasks, self.connections))

    def shutdown(self) -> None:
        if self._hot_busy:
            self._shutting_down = True  # close once the answer is written
        else:
            super().shutdown()


def http_protocol(
    max_connections: int, routes: FastRoutes | None = None, *, limits: HttpLimits | None = None
) -> partial[AgentHttpProtocol]:
    """The protocol factory for ``uvicorn.Config(http=...)``: :class:`AgentHttpProtocol` with
    the settings of a server admitting ``max_connections``, serving ``routes`` (the app; None: an
    ASGI app without hot routes, e.g. one wrapped in middleware) within ``limits``."""
    return partial(AgentHttpProtocol, settings=HttpSettings(max_connections, routes, limits))
