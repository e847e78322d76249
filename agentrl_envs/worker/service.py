"""The worker's service layer: sessions of one task, independent of HTTP.

Contract (AgentRL's worker protocol, docs/protocol.md "Controller → worker"):

* at most ``concurrency`` live sessions; one more → :class:`CapacityError` (HTTP 406);
* one step at a time per session; a second concurrent one → :class:`SessionBusyError`;
* a step that outlives ``interaction_timeout`` ends the session with ``task error``;
* a session idle for ``idle_timeout`` seconds is cancelled (its resources released);
* a finished session is released at once; asking for it again → :class:`UnknownSessionError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..client import api_url
from ..episode import Episode, TaskRuntime
from ..errors import CapacityError, SessionBusyError, SessionError, UnknownSessionError
from ..schema import EnvOutput, SampleIndex

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 8.0


if hasattr(asyncio, "timeout"):  # Python >= 3.11: a timer on the running task, no task per step

    async def _within(coro: Any, seconds: float) -> Any:
        async with asyncio.timeout(seconds):
            return await coro

else:  # pragma: no cover - Python 3.10

    async def _within(coro: Any, seconds: float) -> Any:
        return await asyncio.wait_for(coro, seconds)


@dataclass
class _Session:
    id: int
    index: SampleIndex
    episode: Episode
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_active: float = field(default_factory=time.monotonic)


class WorkerService:
    def __init__(
        self,
        runtime: TaskRuntime,
        *,
        concurrency: int | None = None,
        idle_timeout: float = 300.0,
        interaction_timeout: float = 240.0,
        controller_url: str | None = None,
        self_address: str | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self.runtime = runtime
        self.concurrency = concurrency or runtime.task_cls.concurrency
        self.idle_timeout = idle_timeout
        self.interaction_timeout = interaction_timeout
        self.controller_url = api_url(controller_url).rstrip("/") if controller_url else None
        self.self_address = self_address
        self.heartbeat_interval = heartbeat_interval
        self.sessions: dict[int, _Session] = {}
        self._pending = 0  # sessions being started: they hold a slot before they exist
        self._background: list[asyncio.Task[None]] = []
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.runtime.name

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        await self.runtime.open()
        self._background.append(asyncio.create_task(self._expire_loop()))
        if self.controller_url and self.self_address:
            self._heartbeat_stop.clear()
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="worker-heartbeat", daemon=True)
            self._heartbeat_thread.start()

    async def shutdown(self) -> None:
        self._heartbeat_stop.set()
        if self._heartbeat_thread is not None:
            await asyncio.to_thread(self._heartbeat_thread.join, 10.0)
            self._heartbeat_thread = None
        for t in self._background:
            t.cancel()
        for t in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.cancel_all()
        await self.runtime.close()

    # ------------------------------------------------------------------ protocol

    async def start_sample(self, session_id: int, index: SampleIndex, custom_task: dict[str, Any] | None = None) -> EnvOutput:
        if session_id in self.sessions:
            raise SessionError(f"session {session_id} already exists on this worker", session_id=session_id)
        active = len(self.sessions) + self._pending
        if active >= self.concurrency:
            raise CapacityError(
                f"worker for task {self.name!r} is full ({active}/{self.concurrency} sessions)",
                active_sessions=active,
                max_sessions=self.concurrency,
            )
        episode = self.runtime.episode(index, custom_task)
        self._pending += 1
        try:
            out = await episode.start()
        except BaseException:
            await episode.close()
            raise
        finally:
            self._pending -= 1
        if not out.finish:
            self.sessions[session_id] = _Session(session_id, index, episode)
        return out

    async def interact(self, session_id: int, messages: list[dict[str, Any]]) -> EnvOutput:
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSessionError(f"no session {session_id} on this worker (never started, finished, cancelled or expired)")
        if session.lock.locked():
            raise SessionBusyError(f"session {session_id} is still executing the previous step; send one step at a time")
        async with session.lock:
            session.last_active = time.monotonic()
            try:
                out = await _within(session.episode.step(messages), self.interaction_timeout)
            except asyncio.TimeoutError:
                out = await session.episode.abort(f"step exceeded {self.interaction_timeout:g} s")
            session.last_active = time.monotonic()
        if out.finish:
            self.sessions.pop(session_id, None)
        return out

    async def cancel(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise UnknownSessionError(f"no session {session_id} on this worker")
        await session.episode.close()

    async def cancel_all(self) -> int:
        ids = list(self.sessions)
        for sid in ids:
            with contextlib.suppress(UnknownSessionError):
                await self.cancel(sid)
        return len(ids)

    def get_sessions(self) -> dict[int, SampleIndex]:
        return {sid: s.index for sid, s in self.sessions.items()}

    def status(self) -> dict[str, int]:
        return {"concurrency": self.concurrency, "current": len(self.sessions) + self._pending}

    # ------------------------------------------------------------------ background

    async def _expire_loop(self) -> None:
        period = max(0.05, min(10.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for sid, s in list(self.sessions.items()):
                if not s.lock.locked() and now - s.last_active > self.idle_timeout:
                    log.info("session %d idle for %.0f s: cancelled", sid, now - s.last_active)
                    with contextlib.suppress(UnknownSessionError):
                        await self.cancel(sid)

    def _heartbeat_loop(self) -> None:
        """Beats on a thread and a connection of its own, so that session traffic saturating the
        event loop cannot delay the heartbeats into the controller's dead-worker timeout."""
        body = {"name": self.name, "address": self.self_address, "concurrency": self.concurrency, "indices": self.runtime.indices}
        url = f"{self.controller_url}/receive_heartbeat"
        with httpx.Client(timeout=5.0) as http:
            registered = False
            while not self._heartbeat_stop.is_set():
                try:
                    http.post(url, json=body).raise_for_status()
                    registered = True
                except httpx.HTTPError as e:
                    if registered:
                        log.warning("heartbeat to %s failed: %r", url, e)
                    registered = False
                # Until the controller has answered once (it may still be starting), retry fast.
                self._heartbeat_stop.wait(self.heartbeat_interval if registered else min(0.25, self.heartbeat_interval))
