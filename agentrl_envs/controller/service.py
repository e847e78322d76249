"""The controller's service layer: its workers (:mod:`.registry`), its sessions (:mod:`.sessions`)
and the sweep that keeps both true (:mod:`.sweeper`), wired together; the HTTP layer (:mod:`.app`)
calls this class only.

Contract (AgentRL's controller, docs/protocol.md "Worker → controller: the heartbeat"):

* a worker registers with its first heartbeat and stays *live* while it beats, or answers a
  routed request, at least every ``heartbeat_timeout`` (11 s); only live, non-stale workers get
  new sessions, and of those the one with the most free slots (a full worker answers 406);
* a session belongs to the worker that started it; one interact at a time per session;
* when a worker dies (a request to it fails, or it is silent for ``dead_after`` and does not
  answer a probe either), its sessions end with status ``task error`` and an error saying so;
  when it beats again it re-registers as new. Silence is counted from its last heartbeat *or*
  last answer to a routed request, whichever is later: a worker busy with sessions is alive
  even when its heartbeats are late. A worker with neither recent heartbeats nor answers gets
  no new sessions but keeps the ones it has; only one that answers neither heartbeats, requests
  nor a ``GET /health`` probe on its own connection (any HTTP answer counts) is declared dead;
* a worker declared dead has its requests in flight failed at once (their sessions end
  ``task error`` then, not at the interaction timeout);
* when a worker registers (first heartbeat, or again after being declared dead) the controller
  cancels the sessions it holds that the controller does not know (left from an earlier run of
  the controller, or ended while the worker was unreachable), so nothing idles on a worker;
* ended sessions are remembered (bounded) so a late interact gets "already ended", not "unknown";
  session ids are ``start time in ms × 1000 + n``, so an id from an earlier run of a restarted
  controller is told apart (:class:`SessionLostError`, HTTP 410: retry the sample) from one
  that never existed;
* a *renewal* (agentrl-eval's ``--controller-renew``, :func:`~agentrl_envs.protocol.agentrl.is_renewal`)
  is not a step: it restarts the session's idle clock here and on its worker, and is answered
  ``running`` with the renewal message itself as ``messages``;
* a worker that restarted (a heartbeat from its address with another run ``id`` than the one
  registered there) is declared dead as above, its sessions with it, and registers as new: a
  restart at the same address (a container's restart policy, a supervisor) is not mistaken for
  the worker that held those sessions;
* AgentRL's admin and worker endpoints: ``cancel_notice`` (a worker finished a cancel with
  notice: the session ends, once the worker that owns it confirms it no longer holds it,
  :mod:`.notices`), ``clean_worker`` / ``clean_session`` (the sweep's two halves, now),
  ``sync_all`` (reconcile every worker now), ``cancel_all`` refusing to cancel several tasks'
  sessions without ``force``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable
from typing import Any

from ..protocol.agentrl import HeartbeatRequest, SampleIndex, SampleStatus
from ..transport.auth import Principal, bearer
from ..transport.upstream import UpstreamPool
from .metrics import ControllerMetrics
from .notices import NoticeChecker
from .registry import Worker, WorkerRegistry
from .sessions import Session, SessionRouter
from .sweeper import Sweeper

log = logging.getLogger(__name__)

VERSION = "agentrl-envs-controller/0.1.0"

__all__ = ["VERSION", "ControllerService", "Session", "Worker"]


class ControllerService:
    def __init__(
        self,
        *,
        heartbeat_timeout: float = 11.0,
        dead_after: float = 30.0,
        idle_timeout: float = 300.0,
        interaction_timeout: float = 240.0,
        remember_ended: int = 100_000,
        metrics: ControllerMetrics | None = None,
        multiplex: bool = True,
        worker_secret: str | None = None,
        worker_ssl: ssl.SSLContext | None = None,
    ) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.dead_after = dead_after
        self.idle_timeout = idle_timeout
        self.interaction_timeout = interaction_timeout
        self.multiplex = multiplex  # steps over one multiplexed connection per worker that offers it
        # Sent on every request to a worker (docs/security.md); the context verifies https workers.
        self._worker_headers = bearer(worker_secret)
        self.worker_ssl = worker_ssl
        self.metrics = metrics or ControllerMetrics()
        self.registry = WorkerRegistry(heartbeat_timeout, self.metrics)
        self.router = SessionRouter(
            self.registry,
            self.metrics,
            self._worker_died,
            interaction_timeout=interaction_timeout,
            remember_ended=remember_ended,
        )
        self.sweeper = Sweeper(
            self.registry,
            self.router,
            self._worker_died,
            heartbeat_timeout=heartbeat_timeout,
            dead_after=dead_after,
            idle_timeout=idle_timeout,
            worker_headers=self._worker_headers,
            worker_ssl=worker_ssl,
        )
        self.probe_timeout = self.sweeper.probe_timeout
        # The state, shared with the parts above (the same objects, read by /metrics and the tests).
        self.workers = self.registry.workers
        self.dead_workers = self.registry.dead_workers
        self.sessions = self.router.sessions
        self.ended = self.router.ended
        self.first_id = self.router.first_id
        self._http: UpstreamPool | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._notices = NoticeChecker(self.sweeper.held_sessions)
        self.metrics.bind(self)  # gauges of sessions, workers and connections, read at scrape time

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        self._http = UpstreamPool(multiplex=self.multiplex, headers=self._worker_headers, ssl_context=self.worker_ssl)
        self.router.http = self._http
        self.router.loop = asyncio.get_running_loop()  # cached: each get_running_loop() is a getpid() call
        self.router.notices = self._notices
        self._sweep_task = asyncio.create_task(self._sweep_loop())

    async def shutdown(self) -> None:
        if self._sweep_task:
            self._sweep_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweep_task
        self.sweeper.close()
        self._notices.close()
        if self._http:
            await self._http.close()

    async def _sweep_loop(self) -> None:
        await self.sweeper.run()

    # ------------------------------------------------------------------ workers

    def alive(self, w: Worker, now: float | None = None) -> bool:
        return self.registry.alive(w, now)

    def heartbeat(self, req: HeartbeatRequest) -> Worker:
        """A worker's heartbeat: it registers (the first, or again after being declared dead) or
        keeps its registration. A heartbeat from a registered worker's address with another run
        ``id`` means that worker restarted: the run we knew is declared dead, its sessions with it."""
        w = self.registry.registered(req)
        if w is not None:
            if req.id == w.run_id:
                self.registry.beat(w, req)
                return w
            self._worker_died(w, f"it restarted (a new run of it registered at {w.address})")
        w = self.registry.register(req)
        self.sweeper.background(self.sweeper.reconcile(w))
        return w

    def _worker_died(self, w: Worker, why: str) -> None:
        """Declare ``w`` dead: its sessions end ``task error``, its requests in flight fail now."""
        if not self.registry.remove_dead(w, why):
            return
        for sid in list(w.sessions):
            self.router.end(sid, SampleStatus.TASK_ERROR, f"worker {w.address} serving this session died: {why}")
        if self._http is not None and not self.registry.at(w.address):
            self._http.abort(w.address, f"worker {w.address} declared dead: {why}")

    def recently_dead(self, now: float) -> list[tuple[str, str]]:
        return self.registry.recently_dead(now)

    def mark_stale(self, name: str, worker_id: str, stale: bool) -> Worker:
        return self.registry.mark_stale(name, worker_id, stale)

    def get_indices(self, name: str) -> list[SampleIndex]:
        return self.registry.get_indices(name)

    def list_workers(self) -> dict[str, list[dict[str, Any]]]:
        return self.registry.describe()

    # ------------------------------------------------------------------ sessions

    async def start_sample(
        self, name: str, index: SampleIndex, custom_task: dict[str, Any] | None, owner: Principal | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Start a session of ``name`` (:meth:`.sessions.SessionRouter.start_sample`)."""
        return await self.router.start_sample(name, index, custom_task, owner)

    async def interact(self, sid: int, messages: list[Any], owner: Principal | None = None) -> dict[str, Any]:
        """One step of session ``sid`` (or a renewal): the client's view of the worker's answer."""
        return await self.router.begin_interact(sid, messages, owner)

    def begin_interact(self, sid: int, messages: list[Any], owner: Principal | None = None) -> Awaitable[dict[str, Any]]:
        """:meth:`interact`, started now (:meth:`.sessions.SessionRouter.begin_interact`)."""
        return self.router.begin_interact(sid, messages, owner)

    async def cancel(self, sid: int, reason: str = "cancelled by the client", owner: Principal | None = None) -> None:
        await self.router.cancel(sid, reason, owner)

    def tasks(self) -> list[str]:
        return self.router.tasks()

    async def cancel_all(self, name: str | None, force: bool = False) -> int:
        return await self.router.cancel_all(name, force)

    async def cancel_notice(self, sid: int) -> tuple[bool, str]:
        return await self.router.cancel_notice(sid)

    def list_sessions(self) -> list[dict[str, Any]]:
        return self.router.describe()

    # ------------------------------------------------------------------ sweeping, now

    async def sync_all(self) -> dict[str, Any]:
        return await self.sweeper.sync_all()

    async def clean_workers(self) -> dict[str, Any]:
        return await self.sweeper.clean_workers()

    async def expire_idle_sessions(self) -> list[int]:
        return await self.sweeper.expire_idle_sessions()
