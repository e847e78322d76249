"""The controller's per-step metrics (plain integers read at scrape time) expose what
prometheus_client's Counter and Histogram would: same names, labels, cumulative buckets, sum."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentrl_envs.controller.metrics import LATENCY_BUCKETS, ControllerMetrics


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name.startswith(name) and not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_latency_histogram_matches_prometheus_clients() -> None:
    m = ControllerMetrics()
    reference = CollectorRegistry()
    ref = Histogram(
        "agentrl_request_seconds", "Controller request latency", ["endpoint", "task"], buckets=LATENCY_BUCKETS, registry=reference
    )
    # on a bound (it counts in that bucket), between bounds, under the first, over the last
    values = [0.0, 0.0005, 0.0007, 0.001, 0.003, 1, 239.9, 240, 241, 1e6]
    for v in values:
        m.latency.labels("interact", "calc").observe(v)
        ref.labels("interact", "calc").observe(v)
    m.latency.labels("start_sample", "db").observe(0.02)
    ref.labels("start_sample", "db").observe(0.02)
    ours, theirs = samples(m.registry, "agentrl_request_seconds"), samples(reference, "agentrl_request_seconds")
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert abs(ours[key] - value) < 1e-9, key
    inf = ("agentrl_request_seconds_bucket", (("endpoint", "interact"), ("le", "+Inf"), ("task", "calc")))
    assert ours[inf] == len(values)


def test_interact_counter_counts_by_task_and_status() -> None:
    m = ControllerMetrics()
    for _ in range(3):
        m.interacts.labels("calc", "running").inc()
    m.interacts.labels("calc", "completed").inc()
    got = samples(m.registry, "agentrl_interacts")
    assert got[("agentrl_interacts_total", (("status", "running"), ("task", "calc")))] == 3
    assert got[("agentrl_interacts_total", (("status", "completed"), ("task", "calc")))] == 1
    assert len(got) == 2
