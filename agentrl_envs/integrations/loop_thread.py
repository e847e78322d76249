"""An event loop on a thread of its own, for synchronous callers of our async client code.

TRL calls an environment's tools synchronously from its training thread; openenv-core calls an
environment from its server's loop, its executor threads, or (``close``) either. Our sessions
(:class:`~agentrl_envs.agent.AgentSession` over an async transport) are bound to the loop they
were opened on, so each integration keeps them on one :class:`LoopThread` and hands coroutines
to it from wherever it is called.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """``run(coro)`` waits for ``coro`` run on the thread's loop; ``submit(coro)`` does not wait."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=name)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this loop and wait for its result (from any thread but this loop's own)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop: await the coroutine instead")
        return self.submit(coro).result()

    async def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on this loop, from a coroutine running on another loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
