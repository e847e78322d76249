"""A short version of benchmarks/ablations.py: one optimizer step per condition on the db task,
one held-out greedy episode, then the summary and its verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from script_helpers import load_benchmark

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1200)]


def _bench():
    return load_benchmark("ablations")


def test_one_step_per_condition_writes_every_record_and_the_summary(tmp_path: Path) -> None:
    bench = _bench()
    argv = ["--smoke", "--tasks", "db", "--seeds", "0", "--steps", "1", "--eval-samples", "1", "--out", str(tmp_path)]
    summary = bench.main(argv)

    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")}
    assert set(records) == {f"{c}-s0" for c in bench.CONDITIONS}
    for name, r in records.items():
        condition = name.removesuffix("-s0")
        cfg = r["trainer_config"]
        for field, value in bench.CONDITIONS[condition].items():  # the condition's one change was applied
            assert cfg[field] == value, (name, field)
        assert cfg["max_steps"] == 1 and cfg["seed"] == 0 and cfg["tasks"] == ["db"]
        assert [s["step"] for s in r["steps"]] == [1.0] and r["episodes_trained"] >= 2
        assert r["trained"]["episodes"] == 1 and set(r["trained"]["per_task"]) == {"db"}
        assert r["trajectories_per_s"] > 0 and 0.0 <= r["engine_idle_fraction"] <= 1.0
    full = records["full-s0"]["trainer_config"]
    assert full["rollout_mode"] == "async" and full["lagging_fraction"] > 0 and full["task_advantage_norm"] is True

    base = json.loads((tmp_path / "base.json").read_text())
    assert base["samples"] == {"db": base["samples"]["db"][:1]} and base["eval"]["episodes"] == 1
    assert set(summary["conditions"]) == set(bench.CONDITIONS)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert set(saved["conditions"]) == set(bench.CONDITIONS) and set(saved["verdicts"]) == set(bench.IDEAS)
    for idea, v in summary["verdicts"].items():  # one seed: no standard error, so no verdict
        assert v["condition"] == bench.IDEAS[idea] and v["verdict"] == "not measured" and math.isnan(v["combined_se"])
    # resumable: a second call finds every record and trains nothing
    again = bench.main(argv)
    assert again["conditions"]["full"]["mean_reward"][0] == summary["conditions"]["full"]["mean_reward"][0]
