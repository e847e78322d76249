"""Prometheus metrics of the controller (one registry per controller, so tests can make many).

Counters and histograms are updated as things happen (a step's, a session's end); the gauges of
state (sessions by state, worker liveness, upstream connections) are read from the
:class:`~agentrl_envs.controller.service.ControllerService` at scrape time by :class:`_StateCollector`,
so they cost the interact hot path nothing. Steps per second: ``rate(agentrl_interacts_total[1m])``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from .service import ControllerService

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 240)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active = Gauge("agentrl_active_sessions", "Sessions currently open", ["task"], registry=r)
        self.workers = Gauge("agentrl_live_workers", "Registered workers not known dead", ["task"], registry=r)
        self.started = Counter("agentrl_sessions_started", "Sessions started", ["task"], registry=r)
        self.ended = Counter(
            "agentrl_sessions_ended",
            "Sessions ended, by final status (cancelled and task error included)",
            ["task", "status"],
            registry=r,
        )
        self.interacts = Counter("agentrl_interacts", "Interact calls by resulting status", ["task", "status"], registry=r)
        self.renewals = Counter(
            "agentrl_renewals", 'Session renewals (an assistant message with content ""; not steps)', ["task"], registry=r
        )
        self.workers_dead = Counter("agentrl_workers_dead", "Workers declared dead", ["task"], registry=r)
        self.latency = Histogram(
            "agentrl_request_seconds", "Controller request latency", ["endpoint", "task"], buckets=LATENCY_BUCKETS, registry=r
        )
        self._state: _StateCollector | None = None

    def bind(self, service: ControllerService) -> None:
        """Report ``service``'s sessions, workers and upstream connections at scrape time."""
        if self._state is None:
            self._state = _StateCollector(service)
            self.registry.register(self._state)
        else:
            self._state.service = service


class _StateCollector:
    """Gauges read from the service when /metrics is scraped."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        return []  # registered without a trial collect

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        sessions = GaugeMetricFamily(
            "agentrl_sessions",
            "Open sessions by state: running (waiting for the agent) or busy (a step in flight)",
            labels=["task", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        for s in list(svc.sessions.values()):
            key = (s.name, "busy" if s.busy else "running")
            counts[key] = counts.get(key, 0) + 1
        for name in {s.name for s in svc.sessions.values()} | {w.name for w in svc.workers.values()}:
            for state in ("running", "busy"):
                sessions.add_metric([name, state], counts.get((name, state), 0))
        yield sessions

        up = GaugeMetricFamily(
            "agentrl_worker_up",
            "1 if the worker is live (a heartbeat or answer within heartbeat_timeout), 0 if not; "
            "a worker declared dead reports 0 until it registers again",
            labels=["task", "worker"],
        )
        now = time.monotonic()
        seen = set()
        for w in list(svc.workers.values()):
            seen.add((w.name, w.address))
            up.add_metric([w.name, w.address], 1 if svc.alive(w, now) else 0)
        for name, address in svc.recently_dead(now):
            if (name, address) not in seen:
                up.add_metric([name, address], 0)
        yield up

        waiting = GaugeMetricFamily(
            "agentrl_upstream_waiting", "Requests to a worker waiting for a free connection to it", labels=["task", "worker"]
        )
        conns = GaugeMetricFamily(
            "agentrl_upstream_connections",
            "Open connections to a worker: HTTP/1.1 ones busy (a request in flight) or idle, and the multiplexed one",
            labels=["task", "worker", "state"],
        )
        in_flight = GaugeMetricFamily(
            "agentrl_upstream_in_flight", "Requests to a worker awaiting its answer", labels=["task", "worker"]
        )
        names = {w.address: w.name for w in list(svc.workers.values())}
        pool: Any = svc._http
        for address, h in list(getattr(pool, "_hosts", {}).items()):
            name = names.get(address, "")
            waiting.add_metric([name, address], sum(1 for slot in h.waiters if not slot.done()))
            conns.add_metric([name, address, "busy"], len(h.busy))
            conns.add_metric([name, address, "idle"], len(h.idle))
            conns.add_metric([name, address, "multiplexed"], int(h.mux is not None and not h.mux.closed))
            in_flight.add_metric([name, address], len(h.busy) + (len(h.mux.pending) if h.mux is not None else 0))
        yield waiting
        yield conns
        yield in_flight
