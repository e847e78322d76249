"""The soak benchmark, short: a worker's memory and open files stay flat over many episodes.

``benchmarks/alfworld_soak.py`` with one engine process, six games (one per task type) and 120
episodes (every tenth abandoned mid-game) through a real controller and worker. After the warm-up
(every game loaded once, the caches filled) the worker and its engine process must not grow:
RSS within 5 %, the same open descriptors, the same processes. Sizes and counts only, no timings.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "alfworld_soak.py"


@pytest.mark.timeout(600)
def test_soak_memory_and_open_files_stay_flat(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_alfworld_soak", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    out = tmp_path / "soak.json"
    argv = ["--episodes", "120", "--games", "6", "--processes", "1", "--concurrency", "3"]
    assert bench.main([*argv, "--sample-every", "12", "--warmup", "36", "--out", str(out)]) == 0
    result = json.loads(out.read_text())

    assert result["outcomes"] == {"solved": 108, "unsolved": 0, "abandoned": 12}, result["failures"]
    flat = result["flat"]
    assert (flat["from_episode"], flat["to_episode"]) == (36, 120)
    # the worker and its one engine process (a fresh interpreter: no multiprocessing resource tracker)
    assert flat["processes"] == {"start": 2, "end": 2} and flat["same_pids"]
    assert [p["role"] for p in result["series"][-1]["processes"]] == ["worker", "engine"]
    assert flat["fds_delta"] == 0 and flat["fds"]["max"] == flat["fds"]["start"], flat["fds"]
    assert flat["rss_ratio"] <= 1.05 and flat["rss_max_ratio"] <= 1.05, flat["rss_mb"]
    assert len(result["series"]) == 11  # before the first episode, then every 12
