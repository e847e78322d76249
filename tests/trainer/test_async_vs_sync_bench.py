"""The async-vs-sync benchmark's simulation part runs end to end (quick sizes, real echo stack).

Only the shape of the results is checked: tests never assert timings, and the speedup is a
measurement to report, not a test outcome.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from script_helpers import load_benchmark

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.timeout(300)
def test_sim_part_quick_writes_both_modes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    bench = load_benchmark("async_vs_sync")

    out = tmp_path / "async_vs_sync.json"
    assert bench.main(["--part", "sim", "--quick", "--output", str(out)]) == 0

    results = json.loads(out.read_text())
    assert set(results) == {"sim"}
    sim = results["sim"]
    assert sim["simulation"] is True
    equal_work = sim["config"]["equal_work_trajectories"]
    for mode in ("sync", "async"):
        r = sim[mode]
        assert r["trajectories"] >= equal_work
        assert r["trajectories_per_s"] > 0
        assert 0.0 <= r["engine_idle_fraction"] <= 1.0
        assert r["infra_failures"] == 0
    assert sim["sync"]["staleness_mean"] == 0.0  # sync trains only on the current policy's turns
    assert sim["speedup"] > 0
