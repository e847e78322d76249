"""A fast route's handler may answer at once, through a coroutine, or through a future (the
controller's step on a multiplexed worker connection: no task per step); errors, raised at once
or through the awaitable, leave in the one error shape. Served by the real protocol (uvicorn with
``http_protocol``) and over the multiplexed transport."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from stack_helpers import wait_for

from agentrl_envs.errors import SessionBusyError
from agentrl_envs.stack import free_port
from agentrl_envs.transport.answers import WithHeaders
from agentrl_envs.transport.http11 import http_protocol
from agentrl_envs.transport.mux import MuxClient
from agentrl_envs.transport.routes import FastRoutes, service_app


class _Service:
    async def startup(self) -> None: ...

    async def shutdown(self) -> None: ...


def _routes() -> dict[tuple[str, str], Any]:
    def at_once(_: dict[bytes, bytes], body: bytes) -> Any:
        return WithHeaders({"echo": body.decode()}, {"session_id": "7"})

    def refuses(_: dict[bytes, bytes], body: bytes) -> Any:
        raise SessionBusyError("busy now")

    async def coroutine(_: dict[bytes, bytes], body: bytes) -> Any:
        await asyncio.sleep(0.01)
        return {"via": "coroutine", "body": body.decode()}

    def future(_: dict[bytes, bytes], body: bytes) -> Any:
        fut = asyncio.get_running_loop().create_future()
        if body == b"fail":
            asyncio.get_running_loop().call_later(0.01, fut.set_exception, SessionBusyError("busy later"))
        elif body == b"bug":
            asyncio.get_running_loop().call_later(0.01, fut.set_exception, ZeroDivisionError("oops"))
        else:
            asyncio.get_running_loop().call_later(0.01, fut.set_result, {"via": "future", "body": body.decode()})
        return fut

    return {("POST", f"/api/{f.__name__}"): f for f in (at_once, refuses, coroutine, future)}


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    app = FastRoutes(service_app("fast routes", _Service()), _routes())
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio", http=http_protocol(1000, app))
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_for(lambda: srv.started)
    yield port
    srv.should_exit = True
    thread.join(10)


def test_each_kind_of_answer_over_http(server: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server}/api") as c:  # one keep-alive connection
        r = c.post("/at_once", content=b"x")
        assert r.status_code == 200 and r.json() == {"echo": "x"} and r.headers["session_id"] == "7"
        r = c.post("/refuses", content=b"x")
        assert r.status_code == 409 and r.json()["error"] == "session_busy" and r.json()["detail"] == "busy now"
        assert c.post("/coroutine", content=b"y").json() == {"via": "coroutine", "body": "y"}
        assert c.post("/future", content=b"z").json() == {"via": "future", "body": "z"}
        r = c.post("/future", content=b"fail")
        assert r.status_code == 409 and r.json()["detail"] == "busy later"
        r = c.post("/future", content=b"bug")
        assert r.status_code == 500 and r.json()["error"] == "internal_error" and "ZeroDivisionError" in r.json()["detail"]
        assert c.post("/at_once", content=b"still served").json() == {"echo": "still served"}  # the connection goes on


def test_each_kind_of_answer_over_the_multiplexed_transport(server: int) -> None:
    async def main() -> list[tuple[int, bytes]]:
        status, client = await MuxClient.open("127.0.0.1", server, "/api", 5.0)
        assert status == 101 and client is not None
        assert {"at_once", "refuses", "coroutine", "future"} <= client.paths
        answers = [
            client.start(p, b, 5.0)[1]
            for p, b in [(b"at_once", b"a"), (b"refuses", b""), (b"coroutine", b"c"), (b"future", b"f"), (b"future", b"fail")]
        ]
        try:
            return list(await asyncio.gather(*answers))
        finally:
            client.close()

    got = asyncio.run(main())
    assert got[0] == (200, b'{"echo":"a"}')
    assert got[1][0] == 409 and b"busy now" in got[1][1]
    assert got[2] == (200, b'{"via":"coroutine","body":"c"}')
    assert got[3] == (200, b'{"via":"future","body":"f"}')
    assert got[4][0] == 409 and b"busy later" in got[4][1]
