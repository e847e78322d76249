"""The controller's keep-alive HTTP/1.1 upstream client against a raw asyncio HTTP server on loopback
(the multiplexed transport off: tests/test_mux.py tests it, and the fallback from it)."""

from __future__ import annotations

import asyncio

import pytest
from stack_helpers import LoopbackServer

from agentrl_envs.transport.upstream import UpstreamError, UpstreamPool


class RawServer(LoopbackServer):
    """Answers each request per ``mode``: ok (keep-alive), close (Connection: close), hang, drop."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                )
                body = await reader.readexactly(length)
                self.requests.append(head.split(b"\r\n")[0] + b" " + body)
                if self.mode == "hang":
                    await asyncio.sleep(30)
                if self.mode == "drop":
                    writer.close()
                    return
                payload = b'{"echo": ' + body + b"}"
                extra = b"Connection: close\r\n" if self.mode == "close" else b""
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + extra
                    + b"Content-Length: %d\r\n\r\n" % len(payload)
                    + payload
                )
                await writer.drain()
                if self.mode == "close":
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


async def test_keep_alive_reuses_one_connection_and_prefixes_the_path():
    server, pool = RawServer(), UpstreamPool(multiplex=False)
    async with server as address:
        for i in range(5):
            status, body = await pool.post(address, "interact", b'{"n": %d}' % i, timeout=5)
            assert (status, body) == (200, b'{"echo": {"n": %d}}' % i)
    await pool.close()
    assert server.connections == 1
    assert server.requests[0] == b'POST /api/interact HTTP/1.1 {"n": 0}'


async def test_concurrent_requests_open_parallel_connections_and_match_responses():
    server, pool = RawServer(), UpstreamPool(multiplex=False)
    async with server as address:
        results = await asyncio.gather(*(pool.post(address, "x", b"%d" % i, timeout=5) for i in range(20)))
    await pool.close()
    assert [body for _, body in results] == [b'{"echo": %d}' % i for i in range(20)]


async def test_connection_close_is_honoured():
    server, pool = RawServer("close"), UpstreamPool(multiplex=False)
    async with server as address:
        for _ in range(3):
            assert (await pool.post(address, "x", b"1", timeout=5))[0] == 200
    assert server.connections == 3


@pytest.mark.parametrize("mode, match", [("hang", "within 0.3 s"), ("drop", "closed by the worker")])
async def test_hung_or_dropping_worker_raises(mode, match):
    server, pool = RawServer(mode), UpstreamPool(multiplex=False)
    async with server as address:
        with pytest.raises(UpstreamError, match=match):
            await pool.post(address, "x", b"1", timeout=0.3)
    await pool.close()


async def test_refused_connection_and_bad_address_raise():
    pool = UpstreamPool(multiplex=False)
    with pytest.raises(UpstreamError, match="cannot connect"):
        await pool.post("http://127.0.0.1:1/api", "x", b"1", timeout=1)
    with pytest.raises(UpstreamError, match="must be http"):
        await pool.post("ftp://host/api", "x", b"1", timeout=1)


class SlowServer(RawServer):
    """Answers after a short pause; counts the connections open at once."""

    def __init__(self) -> None:
        super().__init__("ok")
        self.open_now = 0
        self.most_open = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                self.requests.append(body)
                await asyncio.sleep(0.01)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1


async def test_at_most_max_connections_per_worker_and_the_rest_wait_in_line():
    server, pool = SlowServer(), UpstreamPool(multiplex=False, max_connections=3)
    async with server as address:
        results = await asyncio.gather(*(pool.post(address, "x", b"%d" % i, 10) for i in range(30)))
        assert [body for _, body in results] == [b"%d" % i for i in range(30)]
        assert server.most_open == 3 and len(server.requests) == 30
        # Served first come, first served: after the first three, in the order they queued.
        assert server.requests[3:] == [b"%d" % i for i in range(3, 30)]
    await pool.close()


async def test_requests_waiting_for_a_connection_fail_on_abort_and_on_timeout():
    server, pool = RawServer("hang"), UpstreamPool(multiplex=False, max_connections=1)
    async with server as address:
        first = asyncio.ensure_future(pool.post(address, "x", b"1", 10))
        await asyncio.sleep(0.05)
        with pytest.raises(UpstreamError, match="no connection .* free within 0.2 s"):
            await pool.post(address, "x", b"2", 0.2)
        queued = asyncio.ensure_future(pool.post(address, "x", b"3", 10))
        await asyncio.sleep(0.05)
        assert pool.abort(address, "worker declared dead") == 2
        for fut in (first, queued):
            with pytest.raises(UpstreamError, match="declared dead"):
                await fut
    await pool.close()
