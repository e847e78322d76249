"""The multiplexed controller → worker transport (agentrl_envs.transport.mux): the controller's steps to our
workers share one connection per worker, answers are matched to their requests whatever their
order, and a worker that does not offer it (AgentRL's own) is spoken to over HTTP/1.1."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stack_helpers import LoopbackServer, wait_for
from tasks_for_tests import Calc, call

from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread
from agentrl_envs.transport.mux import HEAD, MAX_FRAME, MuxClient
from agentrl_envs.transport.upstream import UpstreamError, UpstreamPool
from agentrl_envs.worker import WorkerService, create_worker_app


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples
    }


def test_the_controller_steps_over_one_multiplexed_connection_answered_out_of_order(make_stack):
    stack = make_stack()
    worker = stack.add_worker(Calc, concurrency=4)
    address = f"{worker.url}/api"
    sids = []
    for _ in range(3):
        r = httpx.post(f"{stack.url}/api/start_sample", json={"name": "calc", "index": 0})
        assert r.status_code == 200, r.text
        sids.append(int(r.headers["session_id"]))
    naps = [0.9, 0.5, 0.05]  # sent in this order, answered in the reverse one

    def step(sid: int, seconds: float) -> httpx.Response:
        message = call("nap", orjson.dumps({"seconds": seconds}).decode(), call_id=f"c{sid}")
        return httpx.post(f"{stack.url}/api/interact", headers={"session_id": str(sid)}, json={"messages": [message]})

    labels = lambda **kw: frozenset(kw.items())  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(step, sid, s) for sid, s in zip(sids, naps, strict=True)]
        # the two long naps are on the wire together (the short one may be answered already)
        wait_for(lambda: scrape(stack.url).get(("agentrl_upstream_in_flight", labels(task="calc", worker=address)), 0) >= 2)
        answers = [f.result() for f in futures]
    for sid, r in zip(sids, answers, strict=True):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "running"
        # each answer is its own session's: the tool result carries the call id sent with it
        assert body["messages"][0]["tool_call_id"] == f"c{sid}", body
    m = scrape(stack.url)
    assert m[("agentrl_upstream_connections", labels(task="calc", worker=address, state="multiplexed"))] == 1
    # nothing went over HTTP/1.1: no such connection was ever opened
    assert m[("agentrl_upstream_connections", labels(task="calc", worker=address, state="idle"))] == 0
    assert m[("agentrl_upstream_in_flight", labels(task="calc", worker=address))] == 0
    done = httpx.post(
        f"{stack.url}/api/interact", headers={"session_id": str(sids[0])}, json={"messages": [call("answer", '{"value": 5}')]}
    ).json()
    assert done["status"] == "completed" and done["reward"] == 1


class AgentRLLikeWorker(LoopbackServer):
    """An HTTP/1.1 server as AgentRL's worker is to this transport: the upgrade is answered 404,
    a POST is echoed."""

    def __init__(self) -> None:
        self.upgrades = 0
        self.posts = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    self.upgrades += 1
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                length = next(
                    int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                self.posts += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


async def test_a_worker_that_refuses_the_upgrade_is_spoken_to_over_http_and_not_asked_again():
    server, pool = AgentRLLikeWorker(), UpstreamPool()
    async with server as address:
        try:
            answers = await asyncio.gather(*(pool.post(address, "interact", b'{"n": %d}' % i, 5.0) for i in range(5)))
            assert answers == [(200, b'{"n": %d}' % i) for i in range(5)]
            assert await pool.post(address, "interact", b"{}", 5.0) == (200, b"{}")
        finally:
            await pool.close()
    assert server.upgrades == 1  # asked once, by the first request; the others waited for that answer
    assert server.posts == 6


class MuxThenClose(LoopbackServer):
    """Accepts the upgrade, reads one frame, and closes the connection (a worker that dies)."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: agentrl-mux\r\nagentrl-mux-routes: interact\r\n\r\n")
        await reader.readexactly(HEAD.size)
        writer.close()


async def test_requests_in_flight_fail_when_the_multiplexed_connection_closes():
    pool = UpstreamPool()
    async with MuxThenClose() as address:
        try:
            results = await asyncio.gather(
                *(pool.post(address, "interact", b"{}", 30.0) for _ in range(3)), return_exceptions=True
            )
        finally:
            await pool.close()
    assert all(isinstance(r, UpstreamError) and "closed" in str(r) for r in results), results


@pytest.fixture
def calc_server():
    runtime = TaskRuntime(Calc, split="dev")
    server = ServerThread(create_worker_app(WorkerService(runtime, concurrency=8))).start()
    yield server
    server.stop()


@pytest.fixture
def calc_worker(calc_server):
    return f"{calc_server.url}/api"


async def test_a_request_that_times_out_leaves_the_connection_to_the_others(calc_worker):
    pool = UpstreamPool()
    try:
        for sid in (1, 2):
            status, _ = await pool.post(calc_worker, "start_sample", orjson.dumps({"index": 0, "session_id": sid}), 5.0)
            assert status == 200
        slow = orjson.dumps({"session_id": 1, "messages": [call("nap", '{"seconds": 1.0}')]})
        with pytest.raises(UpstreamError, match="no answer"):
            await pool.post(calc_worker, "interact", slow, 0.2)
        fast = orjson.dumps({"session_id": 2, "messages": [call("add", '{"x": 2, "y": 2}')]})
        status, body = await pool.post(calc_worker, "interact", fast, 5.0)
        assert status == 200 and orjson.loads(body)["env_out"]["messages"][0]["content"] == "4"
        await asyncio.sleep(1.0)  # the timed-out step's late answer arrives and is dropped
        h = pool._hosts[calc_worker]
        assert h.mux is not None and not h.mux.closed and not h.mux.pending
        assert not h.busy and not h.idle  # all of it on the multiplexed connection
    finally:
        await pool.close()


def upgraded_socket(address: str) -> socket.socket:
    host_port = address.split("//")[1].split("/")[0]
    host, port = host_port.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(b"GET /api/mux HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: agentrl-mux\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    assert b"agentrl-mux-routes: interact,start_sample" in head
    return sock


def test_the_worker_answers_an_unknown_route_404_and_closes_on_an_oversized_frame(calc_worker):
    with upgraded_socket(calc_worker) as sock:
        sock.sendall(HEAD.pack(2, 7, 4) + b"nope" + b"{}")
        answer = sock.recv(4096)
        assert HEAD.unpack_from(answer) == (0, 7, 404)
        sock.sendall(HEAD.pack(MAX_FRAME + 1, 8, 8) + b"interact")
        assert sock.recv(4096) == b""  # closed by the worker
    # the worker serves on
    assert httpx.get(calc_worker.removesuffix("/api") + "/health").status_code == 200


async def test_a_worker_stopping_answers_its_steps_in_flight_then_closes_the_connection(calc_server):
    address, pool = f"{calc_server.url}/api", UpstreamPool()
    try:
        status, _ = await pool.post(address, "start_sample", orjson.dumps({"index": 0, "session_id": 1}), 5.0)
        assert status == 200
        nap = orjson.dumps({"session_id": 1, "messages": [call("nap", '{"seconds": 0.5}')]})
        step = asyncio.create_task(pool.post(address, "interact", nap, 10.0))
        await asyncio.sleep(0.1)  # on the wire
        stopping = asyncio.create_task(asyncio.to_thread(calc_server.stop))
        status, body = await step  # answered before the connection closes
        assert status == 200 and orjson.loads(body)["env_out"]["messages"][0]["content"] == "awake"
        await stopping
        h = pool._hosts[address]
        wait = 0
        while not h.mux.closed and wait < 100:  # the close reaches this end
            await asyncio.sleep(0.02)
            wait += 1
        assert h.mux.closed
        with pytest.raises(UpstreamError, match="cannot open"):  # nothing listens any more
            await pool.post(address, "interact", nap, 5.0)
    finally:
        await pool.close()


async def test_the_upgrade_answer_is_parsed_with_a_frame_in_the_same_packet_and_garbage_refused():
    """The handshake's answer is read by httptools: a 101 followed, in the same write, by the first
    bytes of a frame is split exactly there (the frame completes later and answers its request);
    a non-HTTP answer is an OSError, not a hang."""
    from agentrl_envs.transport import mux

    frame = HEAD.pack(3, 1, 200) + b'"x"'  # an answer frame: body length 3, request id 1, status 200

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes, rest: bytes) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if rest:
            await reader.readexactly(10 + len("interact") + 2)  # the client's request frame (body "{}")
            writer.write(rest)
            await writer.drain()
        await asyncio.sleep(5)
        writer.close()

    cases = ((mux.upgrade_answer(["interact"]) + frame[:6], frame[6:]), (b"\x00\x01garbage\r\n\r\n", b""))
    for answer, rest in cases:
        server = await asyncio.start_server(lambda r, w, a=answer, x=rest: serve(r, w, a, x), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            if not rest:
                with pytest.raises(OSError, match="no HTTP answer"):
                    await mux.MuxClient.open("127.0.0.1", port, "/api", 5)
                continue
            status, client = await mux.MuxClient.open("127.0.0.1", port, "/api", 5)
            assert status == 101 and client is not None and client.paths == frozenset({"interact"})
            rid, answer_fut = client.start(b"interact", b"{}")
            assert rid == 1
            assert await asyncio.wait_for(answer_fut, 5) == (200, b'"x"')
            client.close()
        finally:
            server.close()
            await server.wait_closed()


async def test_one_timer_per_connection_fails_what_is_due_and_nothing_else():
    """Request timeouts on a multiplexed connection share one timer, set to the earliest deadline."""
    from agentrl_envs.transport.mux import MuxClient

    c = MuxClient()  # no transport: frames sent go nowhere, answers are fed by hand
    r1, f1 = c.start(b"interact", b"{}", 0.4)
    r2, f2 = c.start(b"interact", b"{}", 0.1)  # due first: the timer moves to it
    r3, f3 = c.start(b"interact", b"{}", 0.4)
    _, f4 = c.start(b"interact", b"{}", None)  # no limit
    c.data_received(HEAD.pack(2, r3, 200) + b"ok")  # answered in time
    await asyncio.sleep(0.25)
    assert isinstance(f2.exception(), TimeoutError) and not f1.done() and f3.result() == (200, b"ok")
    await asyncio.sleep(0.3)
    assert isinstance(f1.exception(), TimeoutError) and not f4.done()
    assert c._sweep is None and not c._deadlines  # nothing left that can time out: no timer
    c.forget(r1)
    c.fail(ConnectionError("closed"))
    assert isinstance(f4.exception(), ConnectionError)


async def test_call_replies_once_each_from_the_connection_and_a_failing_reply_spares_the_others(calc_worker):
    """MuxClient.call (the controller's step path): each reply gets its answer, its timeout or the
    connection's close, once; a reply that raises does not lose the other answers of that read."""
    host, port = calc_worker.split("//")[1].split("/")[0].split(":")
    status, client = await MuxClient.open(host, int(port), "/api", 5.0)
    assert status == 101 and client is not None
    got: dict[str, list] = {"a": [], "b": [], "slow": [], "late": []}

    def reply(name: str, raise_too: bool = False):
        def on(outcome):
            got[name].append(outcome)
            if raise_too:
                raise RuntimeError("a buggy reply")

        return on

    try:
        for sid in (1, 2, 3):
            _, answer = client.start(b"start_sample", orjson.dumps({"index": 0, "session_id": sid}), 5.0)
            assert (await answer)[0] == 200
        add = orjson.dumps({"session_id": 1, "messages": [call("add", '{"x": 2, "y": 2}')]})
        client.call(b"interact", add, 5.0, reply("a", raise_too=True))
        client.call(b"interact", orjson.dumps({"session_id": 2, "messages": [call("add", '{"x": 1, "y": 1}')]}), 5.0, reply("b"))
        client.call(
            b"interact", orjson.dumps({"session_id": 3, "messages": [call("nap", '{"seconds": 1.0}')]}), 0.2, reply("slow")
        )
        await asyncio.sleep(0.6)
        assert [s for s, _ in got["a"]] == [200] and [s for s, _ in got["b"]] == [200]
        assert orjson.loads(got["b"][0][1])["env_out"]["messages"][0]["content"] == "2"
        assert len(got["slow"]) == 1 and isinstance(got["slow"][0], TimeoutError)
        await asyncio.sleep(0.6)  # the nap's late answer: dropped, not a second reply
        assert len(got["slow"]) == 1 and not client.pending
        client.call(b"interact", add, None, reply("late"))
        client.fail(ConnectionError("gone"))
        assert len(got["late"]) == 1 and isinstance(got["late"][0], ConnectionError)
    finally:
        client.close()
