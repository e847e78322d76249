"""The worker's service layer: sessions of one task, independent of HTTP.

Contract (AgentRL's worker protocol, docs/protocol.md "Controller → worker"):

* at most ``concurrency`` live sessions; one more → :class:`CapacityError` (HTTP 406);
* one step at a time per session; a second concurrent one → :class:`SessionBusyError`;
* a step that outlives ``interaction_timeout`` ends the session with ``task error``;
* a session idle for ``idle_timeout`` seconds is cancelled (its resources released);
* a finished session is released at once; asking for it again → :class:`UnknownSessionError`;
* a *renewal* (agentrl-eval's ``--controller-renew``: one assistant message whose content is
  exactly ``""``, no tool calls, no other field; see :func:`is_renewal`) only refreshes the
  session's idle clock: no turn, the episode untouched, no new messages, even while a step runs;
* ``cancel_with_notice`` (AgentRL's): the session is dropped at once and closed in the
  background, then the controller is told with ``POST {controller}/cancel_notice``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..client import api_url
from ..episode import Episode, TaskRuntime
from ..errors import CapacityError, SessionBusyError, SessionError, UnknownSessionError
from ..protocol.agentrl import EnvOutput, SampleIndex, SampleStatus, is_renewal
from ..transport.auth import bearer, split_userinfo

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 8.0
NOTICE_TIMEOUT_S = 10.0


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
        worker_secret: str | None = None,
        verify: Any = True,
    ) -> None:
        self.runtime = runtime
        self.concurrency = concurrency or runtime.task_cls.concurrency
        self.idle_timeout = idle_timeout
        self.interaction_timeout = interaction_timeout
        # A token in the URL's userinfo moves to the header: the URL is logged, the header never.
        controller_url, url_token = split_userinfo(controller_url) if controller_url else (None, None)
        worker_secret = worker_secret or url_token
        self.controller_url = api_url(controller_url).rstrip("/") if controller_url else None
        self.self_address = self_address
        self.heartbeat_interval = heartbeat_interval
        # Sent with heartbeats and cancel notices (docs/security.md); ``verify``: an https controller's CA.
        self._controller_headers = bearer(worker_secret)
        self._verify = verify
        self.sessions: dict[int, _Session] = {}
        self._pending = 0  # sessions being started: they hold a slot before they exist
        self._background: list[asyncio.Task[None]] = []
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._noticing: set[asyncio.Task[None]] = set()  # cancels with notice in progress
        self._notice_http: httpx.AsyncClient | None = None
        # Sent with every heartbeat: the controller tells this run from an earlier one at the same address.
        self.run_id = uuid.uuid4().hex

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
        if self._noticing:  # let cancels with notice finish and tell the controller, briefly
            _, pending = await asyncio.wait(set(self._noticing), timeout=NOTICE_TIMEOUT_S)
            for t in pending:
                t.cancel()
        if self._notice_http is not None:
            await self._notice_http.aclose()
            self._notice_http = None
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
        if is_renewal(messages):
            return self._renew(session)
        if session.lock.locked():
            raise SessionBusyError(f"session {session_id} is still executing the previous step; send one step at a time")
        async with session.lock:
            session.last_active = time.monotonic()
            try:
                out = await _within(session.episode.step(messages), self.interaction_timeout)
            except TimeoutError:
                out = await session.episode.abort(f"step exceeded {self.interaction_timeout:g} s")
            session.last_active = time.monotonic()
        if out.finish:
            self.sessions.pop(session_id, None)
        return out

    @staticmethod
    def _renew(session: _Session) -> EnvOutput:
        """A renewal: the idle clock restarts; no turn, no new messages, the episode untouched
        (a step in flight goes on: a renewal takes no lock)."""
        session.last_active = time.monotonic()
        out = session.episode.output([])
        if out.finish:  # a step in flight just ended it: that step reports the end
            out = out.model_copy(update={"status": SampleStatus.RUNNING, "finish": False})
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

    def cancel_with_notice(self, session_id: int) -> None:
        """AgentRL's ``cancel_with_notice``: drop the session now (its slot is free, it is no longer
        listed), close it in the background, then ``POST {controller}/cancel_notice`` with header
        ``session_id`` and body ``{"session_id": N}``. Unknown session → :class:`UnknownSessionError`
        (an AgentRL controller then falls back to plain ``cancel``)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise UnknownSessionError(f"no session {session_id} on this worker")
        task = asyncio.get_running_loop().create_task(self._close_and_notify(session))
        self._noticing.add(task)
        task.add_done_callback(self._noticing.discard)

    def cancel_all_with_notice(self) -> int:
        ids = list(self.sessions)
        for sid in ids:
            with contextlib.suppress(UnknownSessionError):
                self.cancel_with_notice(sid)
        return len(ids)

    async def _close_and_notify(self, session: _Session) -> None:
        try:
            await session.episode.close()
        except Exception:  # Episode.close logs a failed teardown itself; the notice still goes out
            log.exception("closing session %d failed", session.id)
        if not self.controller_url:
            log.info("session %d cancelled; no controller to notify (worker started without --controller)", session.id)
            return
        if self._notice_http is None:
            self._notice_http = httpx.AsyncClient(timeout=NOTICE_TIMEOUT_S, headers=self._controller_headers, verify=self._verify)
        url = f"{self.controller_url}/cancel_notice"
        try:
            r = await self._notice_http.post(url, headers={"session_id": str(session.id)}, json={"session_id": session.id})
            if r.status_code >= 400:
                log.warning("cancel notice for session %d: %s answered %d: %s", session.id, url, r.status_code, r.text[:200])
        except httpx.HTTPError as e:
            log.warning("cancel notice for session %d to %s failed: %r", session.id, url, e)

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
        body = {
            "name": self.name,
            "address": self.self_address,
            "concurrency": self.concurrency,
            "indices": self.runtime.indices,
            "id": self.run_id,
        }
        url = f"{self.controller_url}/receive_heartbeat"
        with httpx.Client(timeout=5.0, headers=self._controller_headers, verify=self._verify) as http:
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
