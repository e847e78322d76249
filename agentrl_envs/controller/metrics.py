"""Prometheus metrics of the controller (one registry per controller, so tests can make many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 240)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active = Gauge("agentrl_active_sessions", "Sessions currently open", ["task"], registry=r)
        self.workers = Gauge("agentrl_live_workers", "Registered workers not known dead", ["task"], registry=r)
        self.started = Counter("agentrl_sessions_started", "Sessions started", ["task"], registry=r)
        self.interacts = Counter("agentrl_interacts", "Interact calls by resulting status", ["task", "status"], registry=r)
        self.latency = Histogram(
            "agentrl_request_seconds", "Controller request latency", ["endpoint", "task"], buckets=LATENCY_BUCKETS, registry=r
        )
