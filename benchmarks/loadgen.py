"""A closed-loop session load generator lean enough to measure a server at 10,000 sessions.

C lanes run echo-K sessions back to back over keep-alive connections (one per lane): a session
is ``start_sample`` then K ``interact`` calls, each sent after the previous answer, as an agent
would; the K-th must end the episode with reward 1 (the echo task with ``--option steps=K``).
Prints one JSON line: steps/s, p50/p99 step latency, sessions ok/failed, errors by kind.

    python benchmarks/loadgen.py --proto worker|controller --base http://127.0.0.1:PORT/api -c 1024

Why not aiohttp or httpx: at ~150 µs of client CPU per request aiohttp saturates its own core
near 5,000 requests/s, below what the worker serves; this client (asyncio protocols, the
httptools parser, pre-encoded request heads) costs ~20 µs. Loopback targets only.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, bytes | None]] | None = None
        self.body: list[bytes] = []
        self.header = b""
        self.session_id: bytes | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def on_message_begin(self) -> None:
        self.body, self.session_id = [], None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"session_id":
            self.session_id = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body), self.session_id))

    async def post(self, head: bytes, body: bytes) -> tuple[int, bytes, bytes | None]:
        self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(head % len(body) + body)
        return await self.waiter


async def run(a: argparse.Namespace) -> dict:
    parts = urlsplit(a.base)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("loopback targets only")
    host, port, prefix = parts.hostname, parts.port or 80, parts.path.rstrip("/")
    loop = asyncio.get_running_loop()

    def head(path: str, extra: str = "") -> bytes:
        return (
            f"POST {prefix}/{path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: %d\r\n\r\n"
        ).encode()

    start_head = head("start_sample")
    latencies: list[float] = []
    errors: dict[str, int] = {}
    ok = failed = 0
    counter = 0
    deadline = time.perf_counter() + a.duration
    give_up = deadline + a.grace
    sid_base = int(time.time()) % 1_000_000 * 1_000_000

    def err(kind: str) -> None:
        errors[kind] = errors.get(kind, 0) + 1

    async def connect() -> _Conn:
        _, conn = await loop.create_connection(_Conn, host, port)
        return conn

    async def lane(i: int) -> None:
        nonlocal ok, failed, counter
        try:
            conn = await connect()
        except OSError as e:
            err(f"connect:{type(e).__name__}")
            failed += 1
            return
        while time.perf_counter() < deadline:
            counter += 1
            n = counter
            index = n % a.indices
            try:
                if a.proto == "worker":
                    sid = sid_base + n
                    status, body, _ = await conn.post(start_head, b'{"index":%d,"session_id":%d}' % (index, sid))
                    ihead = head("interact")
                else:
                    status, body, hdr = await conn.post(start_head, b'{"name":"%s","index":%d}' % (a.task.encode(), index))
                    sid = int(hdr) if hdr else 0
                    ihead = head("interact", f"session_id: {sid}\r\n")
                if status != 200:
                    err(f"start:http_{status}")
                    failed += 1
                    await asyncio.sleep(0.05)
                    continue
                good = True
                for k in range(a.k):
                    call = (
                        b'{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function",'
                        b'"function":{"name":"echo","arguments":"{\\"text\\": \\"s%d-t%d\\"}"}}]}' % (k, sid, k)
                    )
                    payload = (
                        (b'{"session_id":%d,"messages":[%s]}' % (sid, call))
                        if a.proto == "worker"
                        else b'{"messages":[%s]}' % call
                    )
                    t0 = time.perf_counter()
                    status, body, _ = await conn.post(ihead, payload)
                    if status != 200:
                        err(f"interact:http_{status}")
                        good = False
                        break
                    latencies.append(time.perf_counter() - t0)
                    out = orjson.loads(body)
                    out = out.get("env_out", out)
                    last = k == a.k - 1
                    if out.get("finish") != last or (last and out.get("reward") != 1):
                        err("early_finish" if not last else f"no_finish:{out.get('status')}")
                        good = False
                        break
                ok += good
                failed += not good
            except (ConnectionError, OSError) as e:
                err(f"transport:{type(e).__name__}")
                failed += 1
                try:
                    conn = await connect()
                except OSError:
                    await asyncio.sleep(0.05)
            if time.perf_counter() > give_up:
                return

    t0 = time.perf_counter()
    await asyncio.gather(*(lane(i) for i in range(a.c)))
    wall = time.perf_counter() - t0
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return round(1000 * latencies[int(p * (n - 1))], 3) if n else 0.0

    return {
        "proto": a.proto,
        "c": a.c,
        "k": a.k,
        "wall_s": wall,
        "sessions_ok": ok,
        "sessions_failed": failed,
        "steps": n,
        "steps_per_s": n / wall if wall else 0.0,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proto", choices=["worker", "controller"], required=True)
    ap.add_argument("--base", required=True, help="API base, e.g. http://127.0.0.1:5021/api")
    ap.add_argument("--task", default="echo")
    ap.add_argument("-c", type=int, default=64, help="concurrent sessions")
    ap.add_argument("-k", type=int, default=10, help="steps per session")
    ap.add_argument("--duration", type=float, default=15.0, help="no new sessions after this many seconds")
    ap.add_argument("--grace", type=float, default=60.0, help="then stop waiting for sessions in flight")
    ap.add_argument("--indices", type=int, default=100)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < a.c + 64:
        if hard < a.c + 64:
            raise SystemExit(f"{a.c} sessions need {a.c + 64} file descriptors; this host allows {hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(orjson.dumps(uvloop.run(run(a))).decode(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
