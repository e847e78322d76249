"""Prometheus metrics of the controller (one registry per controller, so tests can make many).

Counters and histograms are updated as things happen (a step's, a session's end); the gauges of
state (sessions by state, worker liveness, upstream connections) are read from the
:class:`~agentrl_envs.controller.service.ControllerService` at scrape time by :class:`_StateCollector`,
so they cost the interact hot path nothing. The two updated on every step (the interact counter
and the latency histogram) are plain integers read at scrape time (:class:`_Counters`,
:class:`_Histograms`): prometheus_client's ``inc`` and ``observe`` take a lock per value, several
times the cost of these (docs/performance.md); the controller updates and serves them from its
one event-loop thread. Steps per second: ``rate(agentrl_interacts_total[1m])``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric


class Observed(Protocol):
    """What the state gauges read at scrape time (the :class:`~.service.ControllerService` has it;
    named here, not imported, so that the service can import this module)."""

    sessions: dict[int, Any]
    workers: dict[str, Any]
    _http: Any  # the upstream pool, None before start-up

    def alive(self, w: Any, now: float | None = None) -> bool: ...

    def recently_dead(self, now: float) -> list[tuple[str, str]]: ...


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
        self.interacts = _Counters("agentrl_interacts", "Interact calls by resulting status", ["task", "status"], r)
        self.renewals = Counter(
            "agentrl_renewals", 'Session renewals (an assistant message with content ""; not steps)', ["task"], registry=r
        )
        self.workers_dead = Counter("agentrl_workers_dead", "Workers declared dead", ["task"], registry=r)
        self.latency = _Histograms("agentrl_request_seconds", "Controller request latency", ["endpoint", "task"], r)
        self._state: _StateCollector | None = None

    def bind(self, service: Observed) -> None:
        """Report ``service``'s sessions, workers and upstream connections at scrape time."""
        if self._state is None:
            self._state = _StateCollector(service)
            self.registry.register(self._state)
        else:
            self._state.service = service


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class _Labelled:
    """A labelled family of plain-integer children (``labels(*values)``), collected at scrape time."""

    child: type = _Count

    def __init__(self, name: str, doc: str, labels: list[str], registry: CollectorRegistry) -> None:
        self.name, self.doc, self.label_names = name, doc, labels
        self.children: dict[tuple[str, ...], Any] = {}
        registry.register(self)

    def labels(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = self.child()
        return child

    def describe(self) -> list[Metric]:
        return []  # registered without a trial collect


class _Counters(_Labelled):
    """A labelled counter as prometheus_client's (``labels(...).inc()``)."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.doc, labels=self.label_names)
        for values, child in list(self.children.items()):
            family.add_metric(list(values), child.value)
        yield family


class _Observed:
    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last: over every bound (+Inf)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.buckets[bisect_left(LATENCY_BUCKETS, amount)] += 1  # the first bound >= amount
        self.sum += amount


class _Histograms(_Labelled):
    """A labelled histogram over :data:`LATENCY_BUCKETS` (``labels(...).observe(seconds)``)."""

    child = _Observed

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.label_names)
        bounds = (*(str(float(b)) for b in LATENCY_BUCKETS), "+Inf")
        for values, child in list(self.children.items()):
            cumulative, total = [], 0
            for bound, n in zip(bounds, child.buckets, strict=True):
                total += n
                cumulative.append((bound, total))
            family.add_metric(list(values), cumulative, child.sum)
        yield family


class _StateCollector:
    """Gauges read from the service when /metrics is scraped."""

    def __init__(self, service: Observed) -> None:
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
