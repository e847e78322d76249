"""A lean keep-alive HTTP/1.1 client for the controller → worker hop (JSON POSTs only).

Why not aiohttp or httpx: on this hop the client is most of the controller's cost per step, and
aiohttp spends three to four times the CPU per request of this client (measured: ~150 µs vs 37-46 µs on
the benchmark machine); a Rust client (pyreqwest) halved it too but aborts the interpreter at
exit now and then. Parsing is httptools' (the parser uvicorn uses); this module only keeps a pool
of idle connections per worker, writes requests and matches each response to its request.

Contract: ``await pool.post(address, path, body, timeout) -> (status, body_bytes)``; raises
:class:`UpstreamError` when the worker cannot be reached, closes the connection mid-request,
sends something that is not HTTP, or does not answer within ``timeout`` seconds.
``pool.abort(address, why)`` fails every request in flight to a worker at once.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httptools

IDLE_TTL_S = 30.0  # well under uvicorn's keep-alive (we run it at 75 s): never reuse a closing socket


class UpstreamError(ConnectionError):
    pass


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

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamPool:
    def __init__(self) -> None:
        self._idle: dict[str, list[_Connection]] = {}
        self._targets: dict[str, tuple[str, int, str]] = {}
        self._busy: dict[str, set[_Connection]] = {}  # connections with a request in flight

    def _target(self, address: str) -> tuple[str, int, str]:
        target = self._targets.get(address)
        if target is None:
            parts = urlsplit(address)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamError(f"worker address must be http://host:port[/prefix], got {address!r}")
            target = (parts.hostname, parts.port or 80, parts.path.rstrip("/"))
            self._targets[address] = target
        return target

    async def _connection(self, address: str, host: str, port: int) -> _Connection:
        idle = self._idle.get(address)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.last_used < IDLE_TTL_S:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Connection, host, port)
        except OSError as e:
            raise UpstreamError(f"cannot connect to {host}:{port}: {e}") from e
        return conn

    async def post(self, address: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        host, port, prefix = self._target(address)
        conn = await self._connection(address, host, port)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        conn.waiter = waiter
        busy = self._busy.setdefault(address, set())
        busy.add(conn)
        head = f"POST {prefix}/{path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        assert conn.transport is not None
        conn.transport.write(head.encode("latin-1") + body)
        # A timer instead of asyncio.wait_for: no extra task per request on the hot path.
        timer = loop.call_later(timeout, conn._fail, UpstreamError(f"no answer from {host}:{port} within {timeout:g} s"))
        try:
            result = await waiter
        except BaseException:
            conn.close()
            raise
        finally:
            timer.cancel()
            conn.waiter = None
            busy.discard(conn)
        if conn.closed:
            conn.close()
        else:
            conn.last_used = time.monotonic()
            self._idle.setdefault(address, []).append(conn)
        return result

    def abort(self, address: str, why: str) -> int:
        """Fail every request in flight to ``address`` now (its worker is known dead: waiting for
        the request timeout would only delay the answer) and drop its idle connections."""
        busy = self._busy.pop(address, set())
        for conn in busy:
            conn._fail(UpstreamError(why))
            conn.close()
        for conn in self._idle.pop(address, []):
            conn.close()
        return len(busy)

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
