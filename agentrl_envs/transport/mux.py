"""The multiplexed controller → worker transport: many requests in flight on one connection.

Why: with AgentRL's wire (one HTTP/1.1 request per connection at a time) every step costs the
controller and the worker a read and a write system call each, one event-loop wake-up per
request, and an HTTP parse on both sides: a large share of the two processes' CPU per step.
Here the controller keeps one connection per worker, writes every request of an event-loop turn
in one ``write`` and the worker answers likewise, so under load many steps share each system
call. No well-kept Python library does this cheaply: a message on HTTP/2 (h2) or WebSocket
(websockets) costs more Python per frame than the whole frame handling below. The hop as
measured, with and without this transport: docs/performance.md.

It rides on AgentRL's wire rather than beside it: the controller asks for it with an HTTP
``Upgrade`` on the worker's own port (``GET {prefix}/mux``, ``Upgrade: agentrl-mux``); our worker
answers ``101`` and names the routes it serves this way (``agentrl-mux-routes``); any other answer
(AgentRL's own worker says 404) and the controller keeps to plain HTTP for that worker. After
the ``101``, both directions carry frames::

    request:  !IIH  body length, request id, path length   then path (e.g. b"interact"), body
    answer:   !IIH  body length, request id, HTTP status   then body (the route's JSON answer)

A request id is the client's to choose (unique among its requests in flight on the connection);
answers may come in any order. A connection closed with requests in flight fails them (the
client's to retry or report); a frame longer than ``MAX_FRAME`` ends the connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

import httptools

from .answers import Answer, FastHandler, dispatch

log = logging.getLogger(__name__)

UPGRADE_TOKEN = b"agentrl-mux"
PATH = "/mux"  # under the worker's API prefix: {address}/mux
HEAD = struct.Struct("!IIH")
MAX_FRAME = 64 << 20

# What MuxClient.call hands a request's answer: (status, body), or the exception instead of one.
Reply = Callable[[Any], None]


def tls_options(ssl_context: Any, host: str) -> dict[str, Any]:
    """``loop.create_connection`` keywords for TLS to ``host`` (none without a context)."""
    return {"ssl": ssl_context, "server_hostname": host} if ssl_context is not None else {}


def upgrade_answer(paths: list[str]) -> bytes:
    return b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: %s\r\nagentrl-mux-routes: %s\r\n\r\n" % (
        UPGRADE_TOKEN,
        ",".join(paths).encode("ascii"),
    )


class _Framed(asyncio.Protocol):
    """Frame reading and write coalescing, shared by both ends."""

    transport: asyncio.Transport | None = None
    _paths_in = True  # the frames this end reads carry a path (requests), else a status (answers)

    def __init__(self) -> None:
        # Cached: asyncio.get_running_loop() makes a getpid() system call each time, a visible
        # share of the controller's CPU per step when called per request (docs/performance.md).
        self.loop = asyncio.get_running_loop()
        self._buf = b""
        self._out: list[bytes] = []
        self._flush_at_turn_end = False
        self.closed = False

    def _send(self, frame: bytes) -> None:
        # Everything written during one event-loop turn leaves in one system call.
        self._out.append(frame)
        if not self._flush_at_turn_end:
            self._flush_at_turn_end = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_at_turn_end = False
        out, self._out = self._out, []
        if self.transport is not None and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _frames(self, data: bytes) -> list[tuple[int, int, bytes, bytes]]:
        """The complete frames in what has arrived: (id, path length or status, path, body)."""
        buf = self._buf + data if self._buf else data
        frames = []
        pos, end = 0, len(buf)
        unpack = HEAD.unpack_from
        paths_in = self._paths_in
        while end - pos >= 10:
            length, rid, third = unpack(buf, pos)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes (at most {MAX_FRAME})")
            start = pos + 10 + third if paths_in else pos + 10
            stop = start + length
            if stop > end:
                break
            frames.append((rid, third, buf[pos + 10 : start], buf[start:stop]))
            pos = stop
        self._buf = buf[pos:] if pos < end else b""
        return frames

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class MuxServer(_Framed):
    """The worker's end, swapped in for the HTTP protocol after the ``101``: each request frame is
    dispatched to its hot route as an HTTP request would be (:func:`~.answers.dispatch`), with
    ``headers`` (the upgrading client's principal, read-only) for every request.

    It joins the server's ``connections`` so that a graceful shutdown reaches it: requests in
    flight are answered, then the connection closes (the client sees it closed and stops sending).
    """

    def __init__(
        self,
        routes: dict[bytes, tuple[FastHandler, str]],
        headers: dict[bytes, Any],
        transport: asyncio.Transport,
        tasks: set[Any],
        connections: set[Any],
    ) -> None:
        super().__init__()
        self.routes = routes  # name under the prefix -> (handler, its path)
        self.headers = headers
        self.transport = transport
        self.tasks = tasks  # the server's: shutdown waits for them
        self.connections = connections
        connections.add(self)
        self.running = 0
        self.closing = False

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames(data)
        except ValueError as e:
            log.warning("multiplexed connection closed: %s", e)
            self.close()
            return
        for rid, _, path, body in frames:
            route = self.routes.get(path)
            if route is None or self.closing:
                self._send(HEAD.pack(0, rid, 404 if route is None else 503))
                continue
            self.running += 1
            dispatch(route[0], self.headers, body, route[1], partial(self._answer, rid), self.loop, self.tasks)

    def _answer(self, rid: int, answer: Answer) -> None:
        status, _, payload = answer
        if not self.closed:
            self._send(HEAD.pack(len(payload), rid, status) + payload)
        self.running -= 1
        if self.closing and not self.running:
            self._flush()
            self.close()

    def shutdown(self) -> None:
        """The server is stopping: close once every request in flight is answered."""
        self.closing = True
        if not self.running:
            self._flush()
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.connections.discard(self)


class MuxClient(_Framed):
    """The controller's end: ``rid, answer = client.start(path, body, timeout)``, then ``await
    answer`` → ``(status, body)``, or :class:`TimeoutError` past ``timeout`` (``forget(rid)`` when
    no longer waiting). Or ``client.call(path, body, timeout, reply)``: ``reply`` is called once,
    from the connection's own callbacks, with ``(status, body)`` or the exception (no future and
    no event-loop turn between the answer's arrival and its handling: the controller's step).

    Timeouts: one timer per connection, at the earliest deadline, not one per request (a timer
    set and cancelled per request is a measurable part of the controller's step,
    docs/performance.md; with 10,000 requests in flight it is also a heap of 10,000). When it
    fires it fails what is due and moves to the next deadline: with one timeout for every
    request, about once per timeout.

    Opened with :meth:`open`; until the handshake's answer arrives it reads HTTP, then frames.
    """

    _paths_in = False

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[int, Reply] = {}  # request id -> what to call with its answer
        self._deadlines: dict[int, float] = {}  # request id -> loop time it is due
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = float("inf")
        self.paths: frozenset[str] = frozenset()
        self._next_id = 0
        self._handshake: asyncio.Future[tuple[int, dict[str, str]]] | None = None
        self._parser: Any = None  # httptools' response parser, during the handshake only
        self._answer_headers: dict[str, str] = {}
        self._head_bytes = 0
        self.error: Exception | None = None  # why it closed, for the requests it fails

    @classmethod
    async def open(
        cls, host: str, port: int, prefix: str, timeout: float, *, headers: str = "", ssl_context: Any = None
    ) -> tuple[int, MuxClient | None]:
        """Connect and ask for the upgrade: ``(101, client)``, or ``(status, None)`` when the
        worker answers anything else (it does not speak this transport; 401: a wrong worker
        secret). ``headers``: extra ``Name: value\\r\\n`` lines (the worker secret); ``ssl_context``:
        TLS to an https worker. Raises ``OSError`` when it cannot connect, ``TimeoutError`` when
        it does not answer within ``timeout``."""
        loop = asyncio.get_running_loop()
        _, self = await asyncio.wait_for(loop.create_connection(cls, host, port, **tls_options(ssl_context, host)), timeout)
        self._handshake = loop.create_future()
        self._parser = httptools.HttpResponseParser(self)
        assert self.transport is not None
        self.transport.write(
            b"GET %s%s HTTP/1.1\r\nhost: %s:%d\r\n%sconnection: upgrade\r\nupgrade: %s\r\n\r\n"
            % (prefix.encode("latin-1"), PATH.encode(), host.encode("latin-1"), port, headers.encode("latin-1"), UPGRADE_TOKEN)
        )
        try:
            status, answer = await asyncio.wait_for(self._handshake, timeout)
        except BaseException:
            self.close()
            raise
        if status != 101 or answer.get("upgrade", "").lower() != UPGRADE_TOKEN.decode():
            self.close()
            return status, None
        self.paths = frozenset(p for p in answer.get("agentrl-mux-routes", "").split(",") if p)
        return 101, self

    # httptools callbacks, during the handshake
    def on_header(self, name: bytes, value: bytes) -> None:
        self._answer_headers[name.decode("latin-1").lower()] = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_result((self._parser.get_status_code(), self._answer_headers))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._parser is not None:  # the handshake: an HTTP answer, then (after a 101) frames
            self._head_bytes += len(data)
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserUpgrade as e:
                data = data[e.args[0] :]
            except httptools.HttpParserError as e:
                self._parser = None
                if self._handshake is not None and not self._handshake.done():
                    self._handshake.set_exception(OSError(f"no HTTP answer to the upgrade: {e}"))
                return
            else:
                if self._handshake is not None and not self._handshake.done() and self._head_bytes > 65536:
                    self._parser = None
                    self._handshake.set_exception(OSError("no HTTP answer to the upgrade (over 64 KiB of head)"))
                return  # still the head, or a body after a refusal: nothing to frame
            self._parser = None
            if not data:
                return
        try:
            frames = self._frames(data)
        except ValueError as e:
            self.fail(ConnectionError(f"invalid frame from the worker: {e}"))
            self.close()
            return
        pending, deadlines = self.pending, self._deadlines
        for rid, status, _, body in frames:
            reply = pending.pop(rid, None)
            deadlines.pop(rid, None)
            if reply is not None:
                _deliver(reply, (status, body))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(OSError("connection closed during the upgrade"))
        self.fail(self.error or ConnectionError(f"connection closed by the worker{f': {exc}' if exc else ''}"))

    def fail(self, exc: Exception) -> None:
        """Fail every request in flight with ``exc``."""
        self.error = self.error or exc
        self._deadlines.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep, self._sweep_at = None, float("inf")
        pending, self.pending = self.pending, {}
        for reply in pending.values():
            _deliver(reply, exc)

    def start(self, path: bytes, body: bytes, timeout: float | None = None) -> tuple[int, asyncio.Future[tuple[int, bytes]]]:
        """Send a request; its id and the future of its answer (failed with :class:`TimeoutError`
        when none came within ``timeout`` seconds; None: no limit)."""
        fut: asyncio.Future[tuple[int, bytes]] = self.loop.create_future()
        return self.call(path, body, timeout, partial(_settle, fut)), fut

    def call(self, path: bytes, body: bytes, timeout: float | None, reply: Reply) -> int:
        """Send a request; its id. ``reply`` gets ``(status, body)``, or :class:`TimeoutError` when
        no answer came within ``timeout`` seconds (None: no limit), or :class:`ConnectionError`
        when the connection closes first. Raises :class:`ConnectionError` if it is closed now."""
        if self.closed:
            raise ConnectionError(str(self.error or "connection closed"))
        self._next_id = rid = (self._next_id + 1) & 0xFFFFFFFF
        self.pending[rid] = reply
        if timeout is not None:
            due = self.loop.time() + timeout
            self._deadlines[rid] = due
            if due < self._sweep_at:
                if self._sweep is not None:
                    self._sweep.cancel()
                self._sweep, self._sweep_at = self.loop.call_at(due, self._expire), due
        self._send(HEAD.pack(len(body), rid, len(path)) + path + body)
        return rid

    def _expire(self) -> None:
        """Fail the requests that are due; set the timer to the next deadline."""
        self._sweep, self._sweep_at = None, float("inf")
        now, following = self.loop.time(), float("inf")
        for rid, due in list(self._deadlines.items()):
            if due <= now:
                del self._deadlines[rid]
                reply = self.pending.pop(rid, None)
                if reply is not None:
                    _deliver(reply, TimeoutError())
            elif due < following:
                following = due
        if following < float("inf") and not self.closed:
            self._sweep, self._sweep_at = self.loop.call_at(following, self._expire), following

    def forget(self, rid: int) -> None:
        """Stop waiting for request ``rid`` (answered, timed out or cancelled): a late answer is dropped."""
        self.pending.pop(rid, None)
        self._deadlines.pop(rid, None)


def _deliver(reply: Reply, outcome: Any) -> None:
    try:
        reply(outcome)
    except Exception:  # one caller's bug must not lose the other answers of the same read
        log.exception("handling an answer on the multiplexed connection failed")


def _settle(fut: asyncio.Future[tuple[int, bytes]], outcome: Any) -> None:
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
