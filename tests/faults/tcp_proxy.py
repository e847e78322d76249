"""A loopback TCP proxy that can cut its links like a dead network, for the fault tests.

    python tests/faults/tcp_proxy.py --route LISTEN_PORT:TARGET_PORT [--route ...]

Each route accepts on 127.0.0.1:LISTEN_PORT and forwards both directions to 127.0.0.1:TARGET_PORT.
Control by signal (the proxy prints one line per change, flushed, for the caller to wait on):

* ``SIGUSR1`` partitions: from then on every byte either side sends is read and dropped (no
  error, no FIN, no RST reaches the other side: a dead link). Connections stay open; new ones are
  accepted and black-holed the same way (nothing is forwarded, no upstream is opened).
  Prints ``partitioned N``.
* ``SIGUSR2`` heals: every connection that lost bytes (its byte stream can never be whole again)
  is reset on both sides, as the peers' TCP stacks would eventually do; connections that lost
  nothing carry on, and new ones are forwarded again. Prints ``healed N``.

Dropping (rather than buffering and delivering late) is deliberate: a late delivery is what
SIGSTOP/SIGCONT already tests; this is the link that lost the packets.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from dataclasses import dataclass, field

HOST = "127.0.0.1"


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tainted: bool = False  # bytes were dropped: reset at the next heal
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN: the peer sees a reset connection."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    writer.transport.abort()


class Proxy:
    def __init__(self, routes: list[tuple[int, int]]) -> None:
        self.routes = routes
        self.partitioned = False
        self.partitions = 0
        self.heals = 0
        self.conns: set[_Conn] = set()
        self.servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for listen, target in self.routes:
            server = await asyncio.start_server(
                lambda r, w, t=target: self._accept(r, w, t), HOST, listen, reuse_address=True, backlog=1024
            )
            self.servers.append(server)

    def partition(self) -> None:
        self.partitioned = True
        self.partitions += 1
        print(f"partitioned {self.partitions}", flush=True)

    def heal(self) -> None:
        self.partitioned = False
        reset = 0
        for conn in list(self.conns):
            if conn.tainted:
                reset += 1
                self._close(conn, reset=True)
        self.heals += 1
        print(f"healed {self.heals} (reset {reset} connections that lost bytes)", flush=True)

    def _close(self, conn: _Conn, reset: bool = False) -> None:
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        for w in conn.writers():
            if reset:
                _abort(w)
            else:
                w.close()
        for t in conn.tasks:
            if t is not asyncio.current_task():
                t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int) -> None:
        conn = _Conn(writer)
        self.conns.add(conn)
        if self.partitioned:  # a black hole: accept, read, drop; reset at the heal
            conn.tainted = True
            conn.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            await self._pump(conn, reader, None)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, target)
        except OSError:
            self._close(conn, reset=True)  # the target is down: the client sees a reset, as without the proxy
            return
        conn.upstream = up_writer
        conn.tasks.append(asyncio.create_task(self._pump(conn, up_reader, writer)))
        conn.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        await self._pump(conn, reader, up_writer)

    async def _pump(self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None) -> None:
        try:
            while True:
                data = await src.read(65536)
                if self.partitioned or conn.tainted or dst is None:
                    # Dropped. A FIN is dropped too: the other side keeps waiting, as on a dead link.
                    conn.tainted = True
                    if not data:
                        return
                    continue
                if not data:
                    break
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            if conn.tainted:
                return  # held until the heal resets it
        self._close(conn)


async def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--route", action="append", required=True, metavar="LISTEN:TARGET")
    a = p.parse_args(argv)
    routes = [(int(x), int(y)) for x, _, y in (r.partition(":") for r in a.route)]
    proxy = Proxy(routes)
    await proxy.start()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.partition)
    loop.add_signal_handler(signal.SIGUSR2, proxy.heal)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("listening " + " ".join(f"{x}->{y}" for x, y in routes), flush=True)
    await stop.wait()
    for server in proxy.servers:
        server.close()
    for conn in list(proxy.conns):
        proxy._close(conn, reset=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
