"""The controller's service layer: worker registry, dispatch and session routing.

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
* a *renewal* (agentrl-eval's ``--controller-renew``, :func:`~agentrl_envs.schema.is_renewal`)
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
import itertools
import logging
import ssl
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import orjson

from ..errors import (
    CapacityError,
    ConfirmationRequiredError,
    InvalidRequestError,
    NoWorkerError,
    SessionBusyError,
    SessionError,
    SessionFinishedError,
    SessionLostError,
    UnknownSampleError,
    UnknownSessionError,
    WorkerUnreachableError,
)
from ..protocol.agentrl import HeartbeatRequest, SampleIndex, SampleStatus, client_view, is_renewal
from ..transport.auth import ADMIN, Principal, bearer
from ..transport.upstream import UpstreamError, UpstreamPool
from .metrics import ControllerMetrics
from .notices import NoticeChecker

log = logging.getLogger(__name__)

VERSION = "agentrl-envs-controller/0.1.0"
# Session ids of controllers started after 2020-09-13 (1.6e12 ms) are at least this.
_ID_FLOOR = 1_600_000_000_000 * 1000
# Workers declared dead stay in /metrics (agentrl_worker_up 0) until they register again, this
# long at most, and at most this many.
DEAD_WORKER_MEMORY_S = 3600.0
DEAD_WORKER_MEMORY_N = 1024


@dataclass
class Worker:
    id: str
    name: str
    address: str
    concurrency: int
    indices: list[SampleIndex]
    last_heartbeat: float
    stale: bool = False
    dead: bool = False
    sessions: set[int] = field(default_factory=set)
    last_answer: float = 0.0  # time.monotonic() of its last answer to a routed request
    last_probe: float = 0.0  # ... of its last answer to a /health probe
    probing: bool = False
    run_id: str | None = None  # the heartbeats' ``id``: one per run of the worker process (None: not sent)

    def last_sign(self) -> float:
        """When it last showed it serves: a heartbeat or an answer to a routed request."""
        return max(self.last_heartbeat, self.last_answer)

    def free(self) -> int:
        return self.concurrency - len(self.sessions)

    def describe(self, now: float, heartbeat_timeout: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "address": self.address,
            "concurrency": self.concurrency,
            "current": len(self.sessions),
            "last_heartbeat_s_ago": round(now - self.last_heartbeat, 3),
            "alive": not self.dead and now - self.last_sign() <= heartbeat_timeout,
            "stale": self.stale,
        }


@dataclass
class Session:
    id: int
    name: str
    index: SampleIndex
    worker: Worker
    busy: bool = False
    created: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.monotonic)
    owner: Principal | None = None  # whose token started it (its quota; only it may step it)


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
        self._step_metrics: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._ended_metrics: dict[tuple[str, str], Any] = {}
        self.workers: dict[str, Worker] = {}
        # (task, address) of workers declared dead and not registered again -> time.monotonic()
        self.dead_workers: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.sessions: dict[int, Session] = {}
        # id -> (status, why, whose token started it): a late step of its own client learns how it ended
        self.ended: OrderedDict[int, tuple[str, str, Principal | None]] = OrderedDict()
        self._remember_ended = remember_ended
        # Session ids are ints on AgentRL's wire (kept under 2**53 for JSON readers that use
        # doubles). Start time in ms × 1000: a restarted controller never hands out an id an
        # earlier run did (that would take a million sessions per second of uptime), and an id
        # below its first one is from an earlier run.
        self.first_id = int(time.time() * 1000) * 1000
        self.started_at = time.time()
        self._ids = itertools.count(self.first_id)
        self._http: UpstreamPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._probes: set[asyncio.Task[None]] = set()  # probes and reconciliations in flight
        self._notices = NoticeChecker(self._held_sessions)
        self.probe_timeout = min(5.0, max(0.5, heartbeat_timeout / 2))
        self.metrics.bind(self)  # gauges of sessions, workers and connections, read at scrape time

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()  # cached: each get_running_loop() is a getpid() call
        self._http = UpstreamPool(multiplex=self.multiplex, headers=self._worker_headers, ssl_context=self.worker_ssl)
        self._sweeper = asyncio.create_task(self._sweep_loop())

    async def shutdown(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._probes):
            task.cancel()
        self._notices.close()
        if self._http:
            await self._http.close()

    # ------------------------------------------------------------------ workers

    def alive(self, w: Worker, now: float | None = None) -> bool:
        """Eligible for new sessions: a heartbeat or an answer to a routed request within
        ``heartbeat_timeout`` (under load a controller queues heartbeats behind session traffic,
        so late heartbeats from a worker that is answering must not stop dispatch to it)."""
        return not w.dead and (now or time.monotonic()) - w.last_sign() <= self.heartbeat_timeout

    def heartbeat(self, req: HeartbeatRequest) -> Worker:
        now = time.monotonic()
        address = req.address.rstrip("/")
        for w in list(self.workers.values()):
            if w.name == req.name and w.address == address and not w.dead:
                if req.id != w.run_id:  # another process at its address: the one we knew is gone
                    self._worker_died(w, f"it restarted (a new run of it registered at {address})")
                    break
                w.last_heartbeat, w.concurrency, w.indices = now, req.concurrency, list(req.indices)
                return w
        w = Worker(uuid.uuid4().hex, req.name, address, req.concurrency, list(req.indices), now, run_id=req.id)
        self.workers[w.id] = w
        self.dead_workers.pop((w.name, w.address), None)
        log.info("worker %s registered: task %r at %s (concurrency %d)", w.id, w.name, w.address, w.concurrency)
        self.metrics.workers.labels(w.name).inc()
        self._background(self._reconcile(w))
        return w

    def _probe_client(self) -> httpx.AsyncClient:
        """A client of its own for probes and reconciliations, with the worker secret."""
        return httpx.AsyncClient(timeout=self.probe_timeout, headers=self._worker_headers, verify=self.worker_ssl or True)

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _held_sessions(self, w: Worker, client: httpx.AsyncClient | None = None) -> set[int]:
        """The session ids worker ``w`` holds, by its ``GET get_sessions`` (on ``client``, else a
        probe client of its own). Raises httpx.HTTPError, ValueError or TypeError on a bad answer."""
        if client is None:
            async with self._probe_client() as own:
                return await self._held_sessions(w, own)
        r = await client.get(f"{w.address}/get_sessions")
        r.raise_for_status()
        return {int(sid) for sid in r.json()}

    async def _reconcile(self, w: Worker) -> dict[str, Any]:
        """Bring a worker and this controller to agree on its sessions (on registration, and on
        ``sync_all``): cancel the sessions it holds that this controller does not know, and end
        ``task error`` the sessions this controller routes to it that it no longer holds (not
        those with a step in flight or active since the listing was asked for: a step may have
        just finished them)."""
        asked = time.monotonic()
        orphans: list[int] = []
        ended: list[int] = []
        try:
            async with self._probe_client() as client:
                held = await self._held_sessions(w, client)
                orphans = [sid for sid in held if sid not in self.sessions and sid not in w.sessions]
                for sid in list(w.sessions):
                    s = self.sessions.get(sid)
                    if s is None or s.worker is not w or sid in held or s.busy or max(s.created, s.last_active) >= asked:
                        continue
                    ended.append(sid)
                    self._end(sid, SampleStatus.TASK_ERROR, f"worker {w.address} no longer holds this session (found by a sync)")
                for sid in orphans:
                    await client.post(f"{w.address}/cancel", json={"session_id": sid})
        except (httpx.HTTPError, ValueError, TypeError, AttributeError) as e:
            log.warning("worker %s at %s: could not list or cancel its sessions: %r", w.id, w.address, e)
            return {
                "worker": w.address,
                "task": w.name,
                "error": f"{type(e).__name__}: {e}",
                "cancelled": orphans,
                "ended": ended,
            }
        if orphans:
            log.info("worker %s at %s held %d sessions this controller does not know: cancelled", w.id, w.address, len(orphans))
        if ended:
            log.warning("worker %s at %s no longer holds %d of its sessions: ended task error", w.id, w.address, len(ended))
        return {"worker": w.address, "task": w.name, "cancelled": orphans, "ended": ended}

    def recently_dead(self, now: float) -> list[tuple[str, str]]:
        """(task, address) of the workers declared dead in the last ``DEAD_WORKER_MEMORY_S`` that
        have not registered again (older ones are forgotten here)."""
        while self.dead_workers and now - next(iter(self.dead_workers.values())) > DEAD_WORKER_MEMORY_S:
            self.dead_workers.popitem(last=False)
        return list(self.dead_workers)

    def mark_stale(self, name: str, worker_id: str, stale: bool) -> Worker:
        w = self.workers.get(worker_id)
        if w is None or w.name != name:
            raise SessionError(f"no worker {worker_id!r} for task {name!r}")
        w.stale = stale
        return w

    def _workers_of(self, name: str) -> list[Worker]:
        now = time.monotonic()
        return [w for w in self.workers.values() if w.name == name and self.alive(w, now) and not w.stale]

    def get_indices(self, name: str) -> list[SampleIndex]:
        live = self._workers_of(name)
        if not live:
            raise NoWorkerError(self._no_worker_message(name))
        return live[0].indices

    def _no_worker_message(self, name: str) -> str:
        known = sorted({w.name for w in self.workers.values() if self.alive(w)})
        return f"no live worker serves task {name!r} (live tasks: {', '.join(known) or 'none'})"

    def _worker_died(self, w: Worker, why: str) -> None:
        if w.dead:
            return
        w.dead = True
        log.warning("worker %s (%r at %s) is gone: %s", w.id, w.name, w.address, why)
        self.metrics.workers.labels(w.name).dec()
        self.metrics.workers_dead.labels(w.name).inc()
        self.dead_workers[(w.name, w.address)] = time.monotonic()
        self.dead_workers.move_to_end((w.name, w.address))
        while len(self.dead_workers) > DEAD_WORKER_MEMORY_N:
            self.dead_workers.popitem(last=False)
        for sid in list(w.sessions):
            self._end(sid, SampleStatus.TASK_ERROR, f"worker {w.address} serving this session died: {why}")
        self.workers.pop(w.id, None)
        if self._http is not None and not any(o.address == w.address for o in self.workers.values()):
            self._http.abort(w.address, f"worker {w.address} declared dead: {why}")

    # ------------------------------------------------------------------ sessions

    def _end(self, sid: int, status: SampleStatus | str, why: str = "", name: str | None = None) -> None:
        s = self.sessions.pop(sid, None)
        value = SampleStatus(status).value
        owner = s.owner if s is not None else (self.ended[sid][2] if sid in self.ended else None)
        if s is not None:
            s.worker.sessions.discard(sid)
            self.metrics.active.labels(s.name).dec()
            name = s.name
            if s.owner is not None:
                s.owner.release_session()
        if name is not None and (s is not None or sid not in self.ended):
            key = (name, value)
            counter = self._ended_metrics.get(key)
            if counter is None:
                counter = self._ended_metrics[key] = self.metrics.ended.labels(*key)
            counter.inc()
        self.ended[sid] = (value, why, owner)
        while len(self.ended) > self._remember_ended:
            self.ended.popitem(last=False)

    def _session(self, sid: int, owner: Principal | None = None) -> Session:
        s = self.sessions.get(sid)
        if s is not None:
            if owner is not None and s.owner is not None and s.owner is not owner and ADMIN not in owner.roles:
                raise UnknownSessionError(f"no session {sid}")  # another client's: not there for this one
            return s
        if sid in self.ended:
            status, why, ended_owner = self.ended[sid]
            if owner is not None and ended_owner is not None and ended_owner is not owner and ADMIN not in owner.roles:
                raise UnknownSessionError(f"no session {sid}")  # another client's: not even its status
            raise SessionFinishedError(
                f"session {sid} already ended with status {status!r}" + (f": {why}" if why else ""), status=status
            )
        if _ID_FLOOR <= sid < self.first_id:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
            raise SessionLostError(
                f"session {sid} was opened on an earlier run of this controller, which restarted at {started}: "
                "its episode is lost; start the sample again"
            )
        raise UnknownSessionError(f"no session {sid}")

    async def _post(self, w: Worker, path: str, body: dict[str, Any], timeout: float) -> tuple[int, Any]:
        assert self._http is not None, "controller not started"
        try:
            status, raw = await self._http.post(w.address, path, orjson.dumps(body), timeout)
            w.last_answer = time.monotonic()  # proof of life, whatever the heartbeats say
            return status, orjson.loads(raw) if raw else None
        except (UpstreamError, orjson.JSONDecodeError) as e:
            raise WorkerUnreachableError(f"worker {w.address} failed on {path}: {e}") from e

    async def start_sample(
        self, name: str, index: SampleIndex, custom_task: dict[str, Any] | None, owner: Principal | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Start a session of ``name`` on the live worker with the most free slots. ``owner``: the
        client's token, whose quota (sessions open, starts per minute) it counts against
        (:class:`~agentrl_envs.errors.QuotaExceededError` when over) and who alone may step it."""
        if owner is None:
            return await self._start_sample(name, index, custom_task, None)
        owner.reserve_session()  # before any await: concurrent starts cannot overshoot the quota
        try:
            sid, out = await self._start_sample(name, index, custom_task, owner)
        except BaseException:
            owner.release_session()
            raise
        if out["finish"]:  # ended at once: never held a slot
            owner.release_session()
        return sid, out

    async def _start_sample(
        self, name: str, index: SampleIndex, custom_task: dict[str, Any] | None, owner: Principal | None
    ) -> tuple[int, dict[str, Any]]:
        tried: set[str] = set()
        while True:
            candidates = [w for w in self._workers_of(name) if w.id not in tried]
            if not candidates:
                if not self._workers_of(name):  # none left live (those tried may have died on the try)
                    raise NoWorkerError(self._no_worker_message(name))
                raise CapacityError(
                    f"every worker of task {name!r} is full",
                    active_sessions=self._active(name),
                    max_sessions=self._capacity(name),
                )
            w = max(candidates, key=Worker.free)
            if w.free() <= 0:
                raise CapacityError(
                    f"every worker of task {name!r} is full",
                    active_sessions=self._active(name),
                    max_sessions=self._capacity(name),
                )
            tried.add(w.id)
            sid = next(self._ids)
            w.sessions.add(sid)  # reserve the slot before awaiting
            try:
                status, body = await self._post(
                    w, "start_sample", {"index": index, "custom_task": custom_task, "session_id": sid}, self.interaction_timeout
                )
            except WorkerUnreachableError as e:
                w.sessions.discard(sid)
                self._worker_died(w, str(e))
                continue
            if status == 406:
                w.sessions.discard(sid)
                continue
            if status >= 400:
                w.sessions.discard(sid)
                detail = body.get("detail") if isinstance(body, dict) else body
                if status == 404 or (isinstance(body, dict) and body.get("error") == "unknown_sample"):
                    raise UnknownSampleError(f"task {name!r}: {detail}")
                raise SessionError(f"worker refused to start task {name!r} sample {index!r}: {detail}", status_code=status)
            self.metrics.started.labels(name).inc()
            out = client_view(body, tools=True)
            if out["finish"]:
                w.sessions.discard(sid)
                self._end(sid, out["status"], name=name)
            else:
                self.sessions[sid] = Session(sid, name, index, w, owner=owner)
                self.metrics.active.labels(name).inc()
            return sid, out

    def _active(self, name: str) -> int:
        return sum(len(w.sessions) for w in self._workers_of(name))

    def _capacity(self, name: str) -> int:
        return sum(w.concurrency for w in self._workers_of(name))

    async def interact(self, sid: int, messages: list[Any], owner: Principal | None = None) -> dict[str, Any]:
        """One step of session ``sid`` (or a renewal): the client's view of the worker's answer."""
        return await self.begin_interact(sid, messages, owner)

    def begin_interact(self, sid: int, messages: list[Any], owner: Principal | None = None) -> Awaitable[dict[str, Any]]:
        """:meth:`interact`, started now: an unknown, ended, busy or foreign session raises here;
        the answer is awaited. On a worker's multiplexed connection the step is sent at once and
        the answer is a future completed from the connection's callbacks: no task and no chain
        of coroutines per step (a task and the eight coroutines between the HTTP layer and the
        connection cost ~4.4 µs against ~0.8 µs for a callback, measured in isolation with
        uvloop; the controller spends ~45-60 µs per step). Otherwise (a worker on HTTP/1.1 only, a renewal) a coroutine."""
        if is_renewal(messages):
            return self._renew(sid, messages, owner)
        s = self._session(sid, owner)
        if s.busy:
            raise SessionBusyError(f"session {sid} is still executing the previous step; send one step at a time")
        assert self._http is not None, "controller not started"
        body = orjson.dumps({"session_id": sid, "messages": messages})
        assert self._loop is not None
        t0 = time.perf_counter()
        out: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        sent = self._http.call(s.worker.address, "interact", body, self.interaction_timeout, partial(self._answered, s, t0, out))
        s.busy = True
        return out if sent else self._interact_http(s, body, t0)

    def _answered(self, s: Session, t0: float, out: asyncio.Future[dict[str, Any]], answer: Any) -> None:
        assert self._http is not None
        try:
            outcome: tuple[int, bytes] | Exception = self._http.outcome(s.worker.address, answer, self.interaction_timeout)
        except UpstreamError as e:
            outcome = e
        try:
            result = self._step_answered(s, t0, outcome)
        except Exception as e:
            if not out.done():
                out.set_exception(e)
        else:
            if not out.done():
                out.set_result(result)

    async def _interact_http(self, s: Session, body: bytes, t0: float) -> dict[str, Any]:
        assert self._http is not None
        try:
            outcome: tuple[int, bytes] | Exception = await self._http.post(
                s.worker.address, "interact", body, self.interaction_timeout
            )
        except UpstreamError as e:
            outcome = e
        except BaseException:
            s.busy = False
            raise
        return self._step_answered(s, t0, outcome)

    def _step_answered(self, s: Session, t0: float, outcome: tuple[int, bytes] | Exception) -> dict[str, Any]:
        """A step's answer from its worker (or why there is none), as the client sees it."""
        s.busy = False
        s.last_active = now = time.monotonic()
        sid = s.id
        try:
            if isinstance(outcome, Exception):
                raise outcome
            status, raw = outcome
            s.worker.last_answer = now  # proof of life, whatever the heartbeats say
            body = orjson.loads(raw) if raw else None
        except (UpstreamError, orjson.JSONDecodeError) as e:
            return self._worker_lost(s, WorkerUnreachableError(f"worker {s.worker.address} failed on interact: {e}"))
        if status >= 400:
            code, detail, session_lost = _refusal(status, body)
            if code == "session_busy":
                raise SessionBusyError(f"session {sid}: {detail}")
            if not session_lost:
                raise InvalidRequestError(f"session {sid}: {detail}")
            return self._failed(sid, f"worker {s.worker.address} rejected the step ({status}): {detail}")
        out = client_view(body.get("env_out", {}) if isinstance(body, dict) else {})
        key = (s.name, out["status"])
        counters = self._step_metrics.get(key)
        if counters is None:  # label lookups cost ~2.5 µs each: once per task and status
            counters = self._step_metrics[key] = (
                self.metrics.interacts.labels(*key),
                self.metrics.latency.labels("interact", s.name),
            )
        counters[0].inc()
        counters[1].observe(time.perf_counter() - t0)
        if out["finish"]:
            self._end(sid, out["status"])
        return out

    async def _renew(self, sid: int, messages: list[Any], owner: Principal | None = None) -> dict[str, Any]:
        """A renewal: restart the session's idle clock here and on its worker (forwarded as an
        interact, which the worker treats as a renewal too); no step, no turn. While a step is in
        flight nothing is forwarded (the worker does not expire a session with a step running).
        Not counted in ``agentrl_interacts_total``; ``agentrl_renewals_total`` counts it."""
        s = self._session(sid, owner)
        s.last_active = time.monotonic()
        self.metrics.renewals.labels(s.name).inc()
        out: dict[str, Any] = {"finish": False, "reward": 0, "status": SampleStatus.RUNNING.value, "messages": [], "metrics": {}}
        if not s.busy:
            try:
                status, body = await self._post(
                    s.worker, "interact", {"session_id": sid, "messages": messages}, self.interaction_timeout
                )
            except WorkerUnreachableError as e:
                return self._worker_lost(s, e)
            s.last_active = time.monotonic()
            if status >= 400:
                _, detail, session_lost = _refusal(status, body)
                if session_lost:
                    return self._failed(sid, f"worker {s.worker.address} rejected the renewal ({status}): {detail}")
            else:
                out = client_view(body.get("env_out", {}) if isinstance(body, dict) else {})
                if out["finish"]:  # a worker whose task took the renewal for a step, and ended
                    self._end(sid, out["status"])
                    return out
        if sid not in self.sessions:  # ended meanwhile (cancelled, its worker declared dead)
            return self._failed(sid, "ended during the renewal")
        # The renewal message itself, as `messages`: nothing new from the task, and agentrl-eval's
        # client rejects a running answer with no messages.
        out["messages"] = list(messages)
        return out

    def _worker_lost(self, s: Session, e: WorkerUnreachableError) -> dict[str, Any]:
        """The session's worker did not answer a step or renewal: declared dead, the session ends."""
        self._worker_died(s.worker, str(e))
        return self._failed(s.id, f"worker {s.worker.address} serving this session died: {e}")

    def _failed(self, sid: int, why: str) -> dict[str, Any]:
        if sid not in self.sessions and sid in self.ended:  # already ended (its worker was declared dead)
            status, why, _ = self.ended[sid]
            return {"finish": True, "reward": 0, "status": status, "messages": [], "metrics": {"error": why}}
        name = self.sessions[sid].name if sid in self.sessions else "?"
        self._end(sid, SampleStatus.TASK_ERROR, why, name=name)
        self.metrics.interacts.labels(name, SampleStatus.TASK_ERROR.value).inc()
        return {"finish": True, "reward": 0, "status": SampleStatus.TASK_ERROR.value, "messages": [], "metrics": {"error": why}}

    async def cancel(self, sid: int, reason: str = "cancelled by the client", owner: Principal | None = None) -> None:
        s = self._session(sid, owner)
        self._end(sid, SampleStatus.CANCELLED, reason)
        with contextlib.suppress(WorkerUnreachableError):
            await self._post(s.worker, "cancel", {"session_id": sid}, 30.0)

    def tasks(self) -> list[str]:
        """The tasks registered: those of registered workers and of open sessions."""
        return sorted({w.name for w in self.workers.values()} | {s.name for s in self.sessions.values()})

    async def cancel_all(self, name: str | None, force: bool = False) -> int:
        """Cancel the open sessions of task ``name``, or of every task. As AgentRL's controller:
        without ``name`` while several tasks are registered, only with ``force``."""
        if name is None and not force:
            tasks = self.tasks()
            if len(tasks) > 1:
                raise ConfirmationRequiredError(
                    "multiple tasks are running! confirmation required. "
                    f"(tasks: {', '.join(tasks)}; pass name=TASK, or force=true to cancel every task's sessions)",
                    tasks=tasks,
                )
        ids = [sid for sid, s in self.sessions.items() if name is None or s.name == name]
        await asyncio.gather(*(self.cancel(sid) for sid in ids), return_exceptions=True)
        return len(ids)

    async def cancel_notice(self, sid: int) -> tuple[bool, str]:
        """A worker finished cancelling session ``sid`` (AgentRL's cancel with notice): end it here
        (``cancelled``) and free its slot, once the worker that owns it confirms it no longer holds
        it (:mod:`.notices`: the worker secret is shared, so the notice itself proves nothing).
        Not ended (logged): an unknown or already ended session; one its worker still holds (a
        notice from another worker, or a forged one); one whose worker could not be asked.
        Returns (whether it ended, why not)."""
        s = self.sessions.get(sid)
        if s is None:
            log.info("cancel notice for session %d, which is not open here: ignored", sid)
            return False, f"session {sid} is not open here"
        w = s.worker
        try:
            held = await self._notices.held(w, sid)
        except (httpx.HTTPError, ValueError, TypeError) as e:
            log.warning(
                "cancel notice for session %d refused: its worker %s could not be asked whether it still holds it: %r",
                sid,
                w.address,
                e,
            )
            return False, f"refused: the worker that owns session {sid} could not confirm it dropped it"
        if self.sessions.get(sid) is not s:
            return False, f"session {sid} ended meanwhile"
        if held:
            log.warning(
                "cancel notice for session %d refused: its worker %s still holds it (a notice from another "
                "holder of the worker secret, or one sent before the worker dropped the session)",
                sid,
                w.address,
            )
            return False, f"refused: the worker that owns session {sid} still holds it"
        log.info("session %d: worker %s reports it cancelled, and no longer holds it", sid, w.address)
        self._end(sid, SampleStatus.CANCELLED, f"worker {w.address} reported it cancelled (cancel notice)")
        return True, ""

    async def sync_all(self) -> dict[str, Any]:
        """Reconcile every registered worker now (as on registration): cancel the sessions each
        holds that this controller does not know; end ``task error`` those it no longer holds."""
        results = await asyncio.gather(*(self._reconcile(w) for w in list(self.workers.values()) if not w.dead))
        return {
            "workers": len(results),
            "failed": [{"worker": r["worker"], "task": r["task"], "error": r["error"]} for r in results if "error" in r],
            "cancelled_on_workers": sum(len(r["cancelled"]) for r in results),
            "ended": sorted(sid for r in results for sid in r["ended"]),
        }

    async def clean_workers(self) -> dict[str, Any]:
        """The sweep's worker half, now: probe each worker silent for more than ``dead_after``
        (no heartbeat, answer or probe answer); drop those that do not answer."""
        targets = self._silent_workers(time.monotonic())
        await asyncio.gather(*(self._probe(w, silent) for w, silent in targets))
        return {
            "probed": len(targets),
            "dropped": [{"worker": w.address, "task": w.name} for w, _ in targets if w.dead],
            "kept": [{"worker": w.address, "task": w.name} for w, _ in targets if not w.dead],
        }

    async def expire_idle_sessions(self) -> list[int]:
        """The sweep's session half, now: cancel the sessions idle (no step in flight) for more
        than ``idle_timeout``; their ids."""
        now = time.monotonic()
        idle = [
            (sid, now - s.last_active)
            for sid, s in self.sessions.items()
            if not s.busy and now - s.last_active > self.idle_timeout
        ]
        for sid, for_s in idle:
            log.info("session %d idle for %.0f s: cancelled", sid, for_s)
        results = await asyncio.gather(
            *(self.cancel(sid, f"idle for {for_s:.0f} s (idle timeout {self.idle_timeout:.0f} s)") for sid, for_s in idle),
            return_exceptions=True,
        )
        return [sid for (sid, _), r in zip(idle, results, strict=True) if not isinstance(r, BaseException)]

    def list_workers(self) -> dict[str, list[dict[str, Any]]]:
        now = time.monotonic()
        out: dict[str, list[dict[str, Any]]] = {}
        for w in self.workers.values():
            out.setdefault(w.name, []).append(w.describe(now, self.heartbeat_timeout))
        return out

    def list_sessions(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "session_id": s.id,
                "name": s.name,
                "index": s.index,
                "worker_id": s.worker.id,
                "busy": s.busy,
                "idle_s": round(now - s.last_active, 3),
            }
            for s in self.sessions.values()
        ]

    # ------------------------------------------------------------------ background

    async def _probe(self, w: Worker, silent: float) -> None:
        """A silent worker is dead only if it does not answer ``GET /health`` on a connection of
        its own (not queued behind session traffic) within ``probe_timeout``."""
        try:
            async with self._probe_client() as client:
                await client.get(f"{w.address}/health")
        except httpx.HTTPError as e:
            self._worker_died(w, f"no heartbeat or answer for {silent:.0f} s, and /health did not answer ({type(e).__name__})")
        else:
            w.last_probe = time.monotonic()
            log.warning(
                "worker %s (%r at %s): no heartbeat for %.0f s but it answers: kept, no new sessions until it beats",
                w.id,
                w.name,
                w.address,
                silent,
            )
        finally:
            w.probing = False

    def _silent_workers(self, now: float) -> list[tuple[Worker, float]]:
        """Workers silent past ``dead_after`` and not being probed, marked as being probed now."""
        out = []
        for w in list(self.workers.values()):
            silent = now - max(w.last_sign(), w.last_probe)
            if silent > self.dead_after and not w.probing and not w.dead:
                w.probing = True
                out.append((w, silent))
        return out

    async def _sweep_loop(self) -> None:
        period = max(0.05, min(1.0, self.heartbeat_timeout / 4))
        while True:
            await asyncio.sleep(period)
            for w, silent in self._silent_workers(time.monotonic()):
                self._background(self._probe(w, silent))
            with contextlib.suppress(Exception):
                await self.expire_idle_sessions()


def _refusal(status: int, body: Any) -> tuple[str | None, str, bool]:
    """A worker's error answer to a step: (its code, its detail, whether the session is lost).
    Busy and invalid requests are the client's to fix; anything else (restart, expiry) means the
    worker no longer holds the session and the episode cannot go on."""
    detail = body.get("detail") if isinstance(body, dict) else str(body)
    code = body.get("error") if isinstance(body, dict) else None
    return code, detail, not (code in ("session_busy", "invalid_request") or status == 422)
