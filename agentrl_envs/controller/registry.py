"""The controller's workers: who serves which task, where, how full, and whether they are alive.

A worker registers with its first heartbeat and stays *live* while it beats, or answers a routed
request, at least every ``heartbeat_timeout``; only live, non-stale workers get new sessions (of
those, the one with the most free slots). A worker declared dead leaves the registry and is
remembered (bounded) so that ``/metrics`` reports it down until it registers again. Who declares
a worker dead, and what happens to its sessions, is the service's (:mod:`.service`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..errors import NoWorkerError, SessionError
from ..protocol.agentrl import HeartbeatRequest, SampleIndex
from .metrics import ControllerMetrics

log = logging.getLogger(__name__)

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


class WorkerRegistry:
    """The registered workers (``workers``: id → :class:`Worker`) and those recently declared dead."""

    def __init__(self, heartbeat_timeout: float, metrics: ControllerMetrics) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.metrics = metrics
        self.workers: dict[str, Worker] = {}
        # (task, address) of workers declared dead and not registered again -> time.monotonic()
        self.dead_workers: OrderedDict[tuple[str, str], float] = OrderedDict()

    def alive(self, w: Worker, now: float | None = None) -> bool:
        """Eligible for new sessions: a heartbeat or an answer to a routed request within
        ``heartbeat_timeout`` (under load a controller queues heartbeats behind session traffic,
        so late heartbeats from a worker that is answering must not stop dispatch to it)."""
        return not w.dead and (now or time.monotonic()) - w.last_sign() <= self.heartbeat_timeout

    def registered(self, req: HeartbeatRequest) -> Worker | None:
        """The live registration at the heartbeat's task and address, if any (it may be of
        another run of the worker: compare ``run_id``)."""
        address = req.address.rstrip("/")
        return next((w for w in list(self.workers.values()) if w.name == req.name and w.address == address and not w.dead), None)

    def beat(self, w: Worker, req: HeartbeatRequest) -> None:
        w.last_heartbeat, w.concurrency, w.indices = time.monotonic(), req.concurrency, list(req.indices)

    def register(self, req: HeartbeatRequest) -> Worker:
        """A new registration of the heartbeat's worker."""
        address = req.address.rstrip("/")
        w = Worker(uuid.uuid4().hex, req.name, address, req.concurrency, list(req.indices), time.monotonic(), run_id=req.id)
        self.workers[w.id] = w
        self.dead_workers.pop((w.name, w.address), None)
        log.info("worker %s registered: task %r at %s (concurrency %d)", w.id, w.name, w.address, w.concurrency)
        self.metrics.workers.labels(w.name).inc()
        return w

    def remove_dead(self, w: Worker, why: str) -> bool:
        """Declare ``w`` dead and drop it (remembered as dead); False if it already was. Whether
        another registration shares its address is the caller's to ask (:meth:`at`)."""
        if w.dead:
            return False
        w.dead = True
        log.warning("worker %s (%r at %s) is gone: %s", w.id, w.name, w.address, why)
        self.metrics.workers.labels(w.name).dec()
        self.metrics.workers_dead.labels(w.name).inc()
        self.dead_workers[(w.name, w.address)] = time.monotonic()
        self.dead_workers.move_to_end((w.name, w.address))
        while len(self.dead_workers) > DEAD_WORKER_MEMORY_N:
            self.dead_workers.popitem(last=False)
        self.workers.pop(w.id, None)
        return True

    def at(self, address: str) -> bool:
        """Whether a registered worker has this address."""
        return any(o.address == address for o in self.workers.values())

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

    def live(self, name: str) -> list[Worker]:
        """The workers of task ``name`` that may take new sessions: live and not stale."""
        now = time.monotonic()
        return [w for w in self.workers.values() if w.name == name and self.alive(w, now) and not w.stale]

    def get_indices(self, name: str) -> list[SampleIndex]:
        live = self.live(name)
        if not live:
            raise NoWorkerError(self.no_worker_message(name))
        return live[0].indices

    def no_worker_message(self, name: str) -> str:
        known = sorted({w.name for w in self.workers.values() if self.alive(w)})
        return f"no live worker serves task {name!r} (live tasks: {', '.join(known) or 'none'})"

    def active(self, name: str) -> int:
        return sum(len(w.sessions) for w in self.live(name))

    def capacity(self, name: str) -> int:
        return sum(w.concurrency for w in self.live(name))

    def describe(self) -> dict[str, list[dict[str, Any]]]:
        """Every registered worker, by task (``list_workers``)."""
        now = time.monotonic()
        out: dict[str, list[dict[str, Any]]] = {}
        for w in self.workers.values():
            out.setdefault(w.name, []).append(w.describe(now, self.heartbeat_timeout))
        return out
