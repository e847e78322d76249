"""benchmarks/session_scale.py's SpeedProbe: the servers' CPU time per write, per window, read
from /proc of real processes (a child that burns CPU and writes to a pipe)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_helpers import load_benchmark

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/<pid>/io")


def load_bench():
    return load_benchmark("session_scale")


# writes one byte per ~WORK of CPU, for a while: a server whose every answer costs the same
CHILD = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    x = 0
    for i in range(20000):
        x += i
    os.write(1, b"x")
"""


def test_cpu_and_writes_of_a_real_process_grow_with_its_work() -> None:
    bench = load_bench()
    child = subprocess.Popen([sys.executable, "-c", CHILD, "1.0"], stdout=subprocess.DEVNULL)
    try:
        cpu0, writes0 = bench.cpu_ns_and_writes(child.pid)
        time.sleep(0.5)
        cpu1, writes1 = bench.cpu_ns_and_writes(child.pid)
    finally:
        child.wait(timeout=30)
    assert writes1 - writes0 >= 10  # one write per loop
    assert cpu1 - cpu0 >= 100_000_000  # ≥ 0.1 s of the 0.5 s on CPU (a busy loop, even on a shared core)


def test_probe_sees_a_steady_cost_per_write_of_a_steady_process() -> None:
    bench = load_bench()
    child = subprocess.Popen([sys.executable, "-c", CHILD, "2.0"], stdout=subprocess.DEVNULL)
    try:
        with bench.SpeedProbe([child.pid], period=0.05) as probe:
            time.sleep(1.5)
    finally:
        child.wait(timeout=30)
    s = probe.summary(min_writes=5)
    assert s["windows"] >= 10
    assert s["us_per_write_p10"] <= s["us_per_write_p50"] <= s["us_per_write_p90"]
    assert s["us_per_write_p10"] > 50  # 20,000 additions a write: well over 50 µs in CPython
    assert s["spread_p90_over_p10"] == pytest.approx(s["us_per_write_p90"] / s["us_per_write_p10"], rel=0.02)


def test_summary_of_known_samples() -> None:
    bench = load_bench()
    probe = bench.SpeedProbe([os.getpid()])
    # cumulative (cpu ns, writes): 8 windows costing 10 µs a write, 2 at 20 µs, then a ramp-down of 2 writes
    samples = [(0, 0)]
    for us in [10, 20, 10, 10, 10, 20, 10, 10, 10, 10]:
        cpu, w = samples[-1]
        samples.append((cpu + 100 * us * 1000, w + 100))
    samples.append((samples[-1][0] + 10_000_000, samples[-1][1] + 2))  # under min_writes: left out
    probe.samples = samples
    s = probe.summary(min_writes=50)
    assert s == {
        "windows": 10,
        "us_per_write_p10": 10.0,
        "us_per_write_p50": 10.0,
        "us_per_write_p90": 20.0,
        "spread_p90_over_p10": 2.0,
    }
    probe.samples = samples[:5]
    assert probe.summary() == {}  # too few windows to say
