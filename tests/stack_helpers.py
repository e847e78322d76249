"""Test helpers: real HTTP servers on 127.0.0.1 in background threads, and a controller stack."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread, listening_socket
from agentrl_envs.worker import WorkerService, create_worker_app


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


class Stack:
    """A controller plus workers, in-process over real HTTP; workers can be stopped and restarted."""

    def __init__(self, **controller_kwargs: Any) -> None:
        self.service = ControllerService(**controller_kwargs)
        self.controller = ServerThread(create_controller_app(self.service)).start()
        self.url = self.controller.url
        self.workers: list[ServerThread] = []

    def add_worker(self, task_cls: type, *, port: int | None = None, **worker_kwargs: Any) -> ServerThread:
        runtime = TaskRuntime(task_cls, split=task_cls.splits[0] if task_cls.splits else None)
        listen = listening_socket("127.0.0.1", port or 0)  # a restarted worker binds its old port again
        port = listen.getsockname()[1]
        service = WorkerService(runtime, controller_url=self.url, self_address=f"http://127.0.0.1:{port}/api", **worker_kwargs)
        server = ServerThread(create_worker_app(service), listen=listen).start()
        self.workers.append(server)
        wait_for(
            lambda: any(
                w["alive"] and w["address"].endswith(f":{port}/api")
                for w in httpx.get(f"{self.url}/api/list_workers").json().get(task_cls.name, [])
            )
        )
        return server

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.controller.stop()


class LoopbackServer:
    """A raw asyncio server on 127.0.0.1 (``async with`` gives its address as a worker's, with
    ``/api``); subclasses write ``handle(reader, writer)``."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/api"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
