"""The controller → worker hop: a lean keep-alive HTTP/1.1 client (JSON POSTs only), and the
multiplexed transport (:mod:`.mux`) for the routes a worker serves that way.

A worker is first asked for the multiplexed transport (one connection carrying every request in
flight; see that module for why and what it saved); when it answers anything but ``101`` (AgentRL's
own worker) it is spoken to over HTTP/1.1 only, as are the routes it does not multiplex.

Why not aiohttp or httpx: on this hop the client is most of the controller's cost per step, and
aiohttp spends several times the CPU per request of this client (docs/performance.md); a Rust
client (pyreqwest) halved it too but aborts the interpreter at exit now and then. Parsing is
httptools' (the parser uvicorn uses); this module only keeps a pool of idle connections per
worker, writes requests and matches each response to its request.

Contract: ``await pool.post(address, path, body, timeout) -> (status, body_bytes)``; raises
:class:`UpstreamError` when the worker cannot be reached, closes the connection mid-request,
sends something that is not HTTP, or does not answer within ``timeout`` seconds.
``pool.abort(address, why)`` fails every request in flight to a worker at once. At most
``max_connections`` HTTP connections per worker; further requests wait in line for one.
``headers`` (the worker secret's ``Authorization``) go on every request and on the multiplexed
upgrade; an ``https://`` worker is spoken to over TLS, verified against ``ssl_context`` (default:
the system's trust store).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from urllib.parse import urlsplit

import httptools

from ..errors import WorkerUnreachableError
from .mux import MuxClient, Reply, tls_options

log = logging.getLogger(__name__)

IDLE_TTL_S = 30.0
# Connections per worker at most; more requests wait in line (first come, first served). A worker
# serves one request at a time per core, so more connections only cost file descriptors: at
# 10,000 sessions one per session would need 20,000 descriptors in the controller.
UPSTREAM_MAX_CONNECTIONS = 1024  # well under uvicorn's keep-alive (we run it at 75 s): never reuse a closing socket


class UpstreamError(WorkerUnreachableError):
    """The request to a worker failed: cannot connect, connection lost, not HTTP, or no answer."""

    code = "upstream_error"


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.chunks: list[bytes] = []
        self.closed = False
        self.last_used = time.monotonic()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(UpstreamError(f"invalid HTTP response: {e}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(UpstreamError(f"connection closed by the worker{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.chunks = []

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if not self.parser.should_keep_alive():
            self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.chunks)))

    def _time_out(self, peer: str, timeout: float) -> None:
        self._fail(no_answer(peer, timeout))

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Host:
    """The connections to one worker: idle ones, ones with a request in flight, and the requests
    waiting (first come, first served) for one when ``max_connections`` are open."""

    __slots__ = ("target", "ssl", "idle", "busy", "opening", "waiters", "aborted", "mux", "mux_ok", "mux_opening")

    def __init__(self, target: tuple[str, int, str], tls: ssl.SSLContext | None = None) -> None:
        self.target = target
        self.ssl = tls  # set for an https worker
        self.mux: MuxClient | None = None  # the multiplexed connection, once open
        self.mux_ok: bool | None = None  # does the worker speak it (None: not asked yet)
        self.mux_opening: asyncio.Future[MuxClient | None] | None = None
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.opening = 0
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self.aborted: str | None = None  # why, once abort() gave this worker up


class UpstreamPool:
    def __init__(
        self,
        max_connections: int = UPSTREAM_MAX_CONNECTIONS,
        multiplex: bool = True,
        headers: dict[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.multiplex = multiplex  # ask workers for the multiplexed transport
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._ssl = ssl_context
        self._hosts: dict[str, _Host] = {}

    def _host(self, address: str) -> _Host:
        h = self._hosts.get(address)
        if h is None:
            parts = urlsplit(address)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UpstreamError(f"worker address must be http(s)://host:port[/prefix], got {address!r}")
            tls = None
            if parts.scheme == "https":
                tls = self._ssl or ssl.create_default_context()
            default_port = 443 if tls else 80
            h = self._hosts[address] = _Host((parts.hostname, parts.port or default_port, parts.path.rstrip("/")), tls)
        return h

    async def _acquire(self, h: _Host, timeout: float) -> _Connection:
        now = time.monotonic()
        while h.idle:
            conn = h.idle.pop()
            if not conn.closed and now - conn.last_used < IDLE_TTL_S:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        if len(h.busy) + h.opening >= self.max_connections:
            # Wait in line for a connection another request releases (or for room to open one).
            slot: asyncio.Future[_Connection | None] = loop.create_future()
            h.waiters.append(slot)
            host, port, _ = h.target
            timer = loop.call_later(
                timeout,
                lambda: (
                    slot.done() or slot.set_exception(UpstreamError(f"no connection to {host}:{port} free within {timeout:g} s"))
                ),
            )
            try:
                conn = await slot
            except asyncio.CancelledError:
                if slot.done() and not slot.cancelled() and slot.exception() is None:
                    handed = slot.result()  # handed over just as this request was cancelled: pass it on
                    if handed is not None:
                        h.busy.add(handed)
                        self._release(h, handed)
                raise
            finally:
                timer.cancel()
            if conn is not None:
                return conn
        h.opening += 1
        try:
            host, port, _ = h.target
            _, conn = await loop.create_connection(_Connection, host, port, **tls_options(h.ssl, host))
        except OSError as e:
            raise UpstreamError(f"cannot connect to {h.target[0]}:{h.target[1]}: {e}") from e
        finally:
            h.opening -= 1
        if h.aborted is not None:  # given up while this connection was being opened
            conn.close()
            raise UpstreamError(h.aborted)
        return conn

    def _release(self, h: _Host, conn: _Connection) -> None:
        h.busy.discard(conn)
        reusable = not conn.closed
        if reusable:
            conn.last_used = time.monotonic()
        else:
            conn.close()
        while h.waiters:
            slot = h.waiters.popleft()
            if not slot.done():
                slot.set_result(conn if reusable else None)  # None: room to open a new one
                return
        if reusable:
            h.idle.append(conn)

    async def post(self, address: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        h = self._host(address)
        if self.multiplex and h.mux_ok is not False:
            mux = h.mux if h.mux is not None and not h.mux.closed else await self._open_mux(h, timeout)
            if mux is not None and path in mux.paths:
                return await self._post_mux(h, mux, path, body, timeout)
        conn = await self._acquire(h, timeout)
        h.busy.add(conn)
        host, port, prefix = h.target
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.waiter = waiter
        head = f"POST {prefix}/{path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n{self._extra}Content-Length: {len(body)}\r\n\r\n"
        assert conn.transport is not None
        conn.transport.write(head.encode("latin-1") + body)
        # A timer instead of asyncio.wait_for: no extra task per request on the hot path.
        timer = loop.call_later(timeout, conn._time_out, f"{host}:{port}", timeout)  # the error built only if it fires
        try:
            return await waiter
        except BaseException:
            conn.close()
            raise
        finally:
            timer.cancel()
            conn.waiter = None
            self._release(h, conn)

    def call(self, address: str, path: str, body: bytes, timeout: float, reply: Reply) -> bool:
        """``post`` without a coroutine, where it can be: on the worker's multiplexed connection,
        once open and serving ``path``, send the request now; ``reply`` gets its outcome (read it
        with :meth:`outcome`) from the connection's callbacks. False where it cannot (use :meth:`post`)."""
        h = self._hosts.get(address)
        mux = h.mux if h is not None else None
        if mux is None or mux.closed or path not in mux.paths:
            return False
        mux.call(path.encode(), body, timeout, reply)
        return True

    def outcome(self, address: str, outcome: tuple[int, bytes] | BaseException, timeout: float) -> tuple[int, bytes]:
        """The ``(status, body)`` a :meth:`call` got; raises :class:`UpstreamError` as ``post`` does."""
        if not isinstance(outcome, BaseException):
            return outcome
        raise _mux_failure(self._hosts.get(address), outcome, timeout)

    async def _open_mux(self, h: _Host, timeout: float) -> MuxClient | None:
        """The worker's multiplexed connection, opened now (once, however many requests ask at
        the same time); None if the worker does not speak it."""
        if h.mux_opening is None:
            h.mux_opening = asyncio.get_running_loop().create_future()
            task = asyncio.get_running_loop().create_task(self._upgrade(h, h.mux_opening, timeout))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(h.mux_opening)

    async def _upgrade(self, h: _Host, done: asyncio.Future[MuxClient | None], timeout: float) -> None:
        host, port, prefix = h.target
        try:
            status, mux = await MuxClient.open(host, port, prefix, timeout, headers=self._extra, ssl_context=h.ssl)
        except (TimeoutError, OSError) as e:
            error = UpstreamError(f"cannot open a connection to {host}:{port}: {e or type(e).__name__}")
            if not done.done():
                done.set_exception(error)
                done.exception()  # retrieved: only the requests waiting on it report it
            return
        finally:
            if h.mux_opening is done:
                h.mux_opening = None
        if done.done() or h.aborted is not None:  # given up (abort) meanwhile
            if mux is not None:
                mux.close()
            return
        if mux is None:
            h.mux_ok = False
            if status in (401, 403):
                log.warning("worker at %s:%d refuses this controller's worker secret (%d)", host, port, status)
            else:
                log.info("worker at %s:%d answers %d to the multiplexed transport: HTTP/1.1 only", host, port, status)
        else:
            h.mux_ok, h.mux = True, mux
        done.set_result(mux)

    async def _post_mux(self, h: _Host, mux: MuxClient, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        try:
            rid, answer = mux.start(path.encode(), body, timeout)
        except ConnectionError as e:
            raise UpstreamError(str(e)) from None
        try:
            return await answer
        except (TimeoutError, ConnectionError) as e:
            raise _mux_failure(h, e, timeout) from None
        finally:
            mux.forget(rid)

    def abort(self, address: str, why: str) -> int:
        """Fail every request in flight to ``address``, or waiting for a connection to it, now
        (its worker is known dead: waiting for the timeout would only delay the answer)."""
        h = self._hosts.pop(address, None)
        if h is None:
            return 0
        h.aborted = why  # and requests opening a connection now fail once it is open
        failed = len(h.busy) + h.opening
        if h.mux is not None:
            failed += len(h.mux.pending)
            h.mux.fail(UpstreamError(why))
            h.mux.close()
        if h.mux_opening is not None and not h.mux_opening.done():
            h.mux_opening.set_exception(UpstreamError(why))
            h.mux_opening.exception()
        for conn in list(h.busy):
            conn._fail(UpstreamError(why))
            conn.close()
        for conn in h.idle:
            conn.close()
        for slot in h.waiters:
            if not slot.done():
                slot.set_exception(UpstreamError(why))
                failed += 1
        return failed

    async def close(self) -> None:
        for h in self._hosts.values():
            for conn in [*h.idle, *h.busy]:
                conn.close()
            if h.mux is not None:
                h.mux.close()
        self._hosts.clear()


def _mux_failure(h: _Host | None, exc: BaseException, timeout: float) -> UpstreamError:
    """Why a request on a multiplexed connection got no answer, as ``post`` reports it."""
    if isinstance(exc, TimeoutError):
        return no_answer(f"{h.target[0]}:{h.target[1]}" if h is not None else "the worker", timeout)
    return UpstreamError(str(exc) or type(exc).__name__)


def no_answer(peer: str, timeout: float) -> UpstreamError:
    """The one error of a request to ``peer`` (``host:port``) unanswered after ``timeout`` s."""
    return UpstreamError(f"no answer from {peer} within {timeout:g} s")
