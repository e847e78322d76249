"""The controller's sessions: started on a worker, their steps routed to it, ended once.

* a session belongs to the worker that started it; one interact at a time per session; a
  session started with a client's token answers only that token (or an admin one);
* ended sessions are remembered (bounded) so a late interact gets "already ended", not
  "unknown"; session ids are ``start time in ms × 1000 + n``, so an id from an earlier run of a
  restarted controller is told apart (:class:`SessionLostError`, HTTP 410) from one that never
  existed;
* a *renewal* (:func:`~agentrl_envs.protocol.agentrl.is_renewal`) is not a step: it restarts the
  session's idle clock here and on its worker, and is answered ``running`` with the renewal
  message itself as ``messages``;
* a worker that fails a step or a renewal is declared dead (``worker_died``, the service's) and
  the session ends ``task error``. Every reply to a client is a
  :func:`~agentrl_envs.protocol.agentrl.client_view`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
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
from ..protocol.agentrl import SampleIndex, SampleStatus, client_view, is_renewal
from ..transport.auth import ADMIN, Principal
from ..transport.upstream import UpstreamError, UpstreamPool
from .metrics import ControllerMetrics
from .notices import NoticeChecker
from .registry import Worker, WorkerRegistry

log = logging.getLogger(__name__)

# Session ids of controllers started after 2020-09-13 (1.6e12 ms) are at least this.
_ID_FLOOR = 1_600_000_000_000 * 1000


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


class SessionRouter:
    """Opens sessions on the registry's workers, routes their steps over ``http`` (set at the
    service's start-up) and ends them; ``worker_died(worker, why)`` declares a worker dead."""

    def __init__(
        self,
        registry: WorkerRegistry,
        metrics: ControllerMetrics,
        worker_died: Callable[[Worker, str], None],
        *,
        interaction_timeout: float,
        remember_ended: int,
    ) -> None:
        self.registry = registry
        self.metrics = metrics
        self.worker_died = worker_died
        self.interaction_timeout = interaction_timeout
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
        self._step_metrics: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._ended_metrics: dict[tuple[str, str], Any] = {}
        self.http: UpstreamPool | None = None  # set at start-up, with the loop
        self.loop: asyncio.AbstractEventLoop | None = None
        self.notices: NoticeChecker | None = None

    # ------------------------------------------------------------------ lookup and end

    def end(self, sid: int, status: SampleStatus | str, why: str = "", name: str | None = None) -> None:
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

    def session(self, sid: int, owner: Principal | None = None) -> Session:
        """Open session ``sid`` as ``owner`` may see it; else the error that says why not."""
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

    async def post(self, w: Worker, path: str, body: dict[str, Any], timeout: float) -> tuple[int, Any]:
        assert self.http is not None, "controller not started"
        try:
            status, raw = await self.http.post(w.address, path, orjson.dumps(body), timeout)
            w.last_answer = time.monotonic()  # proof of life, whatever the heartbeats say
            return status, orjson.loads(raw) if raw else None
        except (UpstreamError, orjson.JSONDecodeError) as e:
            raise WorkerUnreachableError(f"worker {w.address} failed on {path}: {e}") from e

    # ------------------------------------------------------------------ start

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

    def _full(self, name: str) -> CapacityError:
        return CapacityError(
            f"every worker of task {name!r} is full",
            active_sessions=self.registry.active(name),
            max_sessions=self.registry.capacity(name),
        )

    async def _start_sample(
        self, name: str, index: SampleIndex, custom_task: dict[str, Any] | None, owner: Principal | None
    ) -> tuple[int, dict[str, Any]]:
        registry = self.registry
        tried: set[str] = set()
        while True:
            candidates = [w for w in registry.live(name) if w.id not in tried]
            if not candidates:
                if not registry.live(name):  # none left live (those tried may have died on the try)
                    raise NoWorkerError(registry.no_worker_message(name))
                raise self._full(name)
            w = max(candidates, key=Worker.free)
            if w.free() <= 0:
                raise self._full(name)
            tried.add(w.id)
            sid = next(self._ids)
            w.sessions.add(sid)  # reserve the slot before awaiting
            try:
                status, body = await self.post(
                    w, "start_sample", {"index": index, "custom_task": custom_task, "session_id": sid}, self.interaction_timeout
                )
            except WorkerUnreachableError as e:
                w.sessions.discard(sid)
                self.worker_died(w, str(e))
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
                self.end(sid, out["status"], name=name)
            else:
                self.sessions[sid] = Session(sid, name, index, w, owner=owner)
                self.metrics.active.labels(name).inc()
            return sid, out

    # ------------------------------------------------------------------ steps

    def begin_interact(self, sid: int, messages: list[Any], owner: Principal | None = None) -> Awaitable[dict[str, Any]]:
        """One step of session ``sid`` (or a renewal), started now: an unknown, ended, busy or
        foreign session raises here; the client's view of the worker's answer is awaited. On a
        worker's multiplexed connection the step is sent at once and the answer is a future
        completed from the connection's callbacks: no task and no chain of coroutines per step
        (they cost several times a callback, docs/performance.md). Otherwise (a worker on
        HTTP/1.1 only, a renewal) a coroutine."""
        if is_renewal(messages):
            return self._renew(sid, messages, owner)
        s = self.session(sid, owner)
        if s.busy:
            raise SessionBusyError(f"session {sid} is still executing the previous step; send one step at a time")
        assert self.http is not None and self.loop is not None, "controller not started"
        body = orjson.dumps({"session_id": sid, "messages": messages})
        t0 = time.perf_counter()
        out: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        sent = self.http.call(s.worker.address, "interact", body, self.interaction_timeout, partial(self._answered, s, t0, out))
        s.busy = True
        return out if sent else self._interact_http(s, body, t0)

    def _answered(self, s: Session, t0: float, out: asyncio.Future[dict[str, Any]], answer: Any) -> None:
        assert self.http is not None
        try:
            outcome: tuple[int, bytes] | Exception = self.http.outcome(s.worker.address, answer, self.interaction_timeout)
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
        assert self.http is not None
        try:
            outcome: tuple[int, bytes] | Exception = await self.http.post(
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
        if counters is None:  # label lookups cost more than the update: once per task and status
            counters = self._step_metrics[key] = (
                self.metrics.interacts.labels(*key),
                self.metrics.latency.labels("interact", s.name),
            )
        counters[0].inc()
        counters[1].observe(time.perf_counter() - t0)
        if out["finish"]:
            self.end(sid, out["status"])
        return out

    async def _renew(self, sid: int, messages: list[Any], owner: Principal | None = None) -> dict[str, Any]:
        """A renewal: restart the session's idle clock here and on its worker (forwarded as an
        interact, which the worker treats as a renewal too); no step, no turn. While a step is in
        flight nothing is forwarded (the worker does not expire a session with a step running).
        Not counted in ``agentrl_interacts_total``; ``agentrl_renewals_total`` counts it."""
        s = self.session(sid, owner)
        s.last_active = time.monotonic()
        self.metrics.renewals.labels(s.name).inc()
        out = client_view({})  # running, nothing new
        if not s.busy:
            try:
                status, body = await self.post(
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
                    self.end(sid, out["status"])
                    return out
        if sid not in self.sessions:  # ended meanwhile (cancelled, its worker declared dead)
            return self._failed(sid, "ended during the renewal")
        # The renewal message itself, as `messages`: nothing new from the task, and agentrl-eval's
        # client rejects a running answer with no messages.
        out["messages"] = list(messages)
        return out

    def _worker_lost(self, s: Session, e: WorkerUnreachableError) -> dict[str, Any]:
        """The session's worker did not answer a step or renewal: declared dead, the session ends."""
        self.worker_died(s.worker, str(e))
        return self._failed(s.id, f"worker {s.worker.address} serving this session died: {e}")

    def _failed(self, sid: int, why: str) -> dict[str, Any]:
        """The reply to a step of a session that ended (now, ``task error``, or already)."""
        if sid not in self.sessions and sid in self.ended:  # already ended (its worker was declared dead)
            status, why, _ = self.ended[sid]
            return client_view({"finish": True, "status": status, "metric": {"error": why}})
        name = self.sessions[sid].name if sid in self.sessions else "?"
        self.end(sid, SampleStatus.TASK_ERROR, why, name=name)
        self.metrics.interacts.labels(name, SampleStatus.TASK_ERROR.value).inc()
        return client_view({"finish": True, "status": SampleStatus.TASK_ERROR.value, "metric": {"error": why}})

    # ------------------------------------------------------------------ cancel

    async def cancel(self, sid: int, reason: str = "cancelled by the client", owner: Principal | None = None) -> None:
        s = self.session(sid, owner)
        self.end(sid, SampleStatus.CANCELLED, reason)
        with contextlib.suppress(WorkerUnreachableError):
            await self.post(s.worker, "cancel", {"session_id": sid}, 30.0)

    def tasks(self) -> list[str]:
        """The tasks registered: those of registered workers and of open sessions."""
        return sorted({w.name for w in self.registry.workers.values()} | {s.name for s in self.sessions.values()})

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
        assert self.notices is not None, "controller not started"
        try:
            held = await self.notices.held(w, sid)
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
        self.end(sid, SampleStatus.CANCELLED, f"worker {w.address} reported it cancelled (cancel notice)")
        return True, ""

    def describe(self) -> list[dict[str, Any]]:
        """Every open session (``list_sessions``)."""
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


def _refusal(status: int, body: Any) -> tuple[str | None, str, bool]:
    """A worker's error answer to a step: (its code, its detail, whether the session is lost).
    Busy and invalid requests are the client's to fix; anything else (restart, expiry) means the
    worker no longer holds the session and the episode cannot go on."""
    detail = body.get("detail") if isinstance(body, dict) else str(body)
    code = body.get("error") if isinstance(body, dict) else None
    return code, detail, not (code in ("session_busy", "invalid_request") or status == 422)
