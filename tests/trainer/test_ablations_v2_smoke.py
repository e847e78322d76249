"""A short version of benchmarks/ablations_v2.py: the base evaluation and one optimizer step of two
conditions, the corners of the 2 x 2 (async with lagging, sync without), on the db task (one
held-out sample, pass@2), each in its own child process, then the summary; a second call resumes
from the records and trains nothing. (Every condition is a config override, checked here for the
two; the summary's effects and verdicts are tested on records written by hand.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_helpers import load_benchmark

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_one_step_of_two_conditions_writes_their_records_and_the_summary(tmp_path: Path) -> None:
    bench = load_benchmark("ablations_v2")
    conditions = ["async-lag", "sync-nolag"]
    argv = ["--smoke", "--tasks", "db", "--seeds", "0", "--steps", "1", "--eval-samples", "1", "--pass-k", "2"]
    argv += ["--conditions", *conditions]
    argv += ["--out", str(tmp_path)]
    summary = bench.main(argv)

    base = json.loads((tmp_path / "base.json").read_text())
    assert base["eval"]["episodes"] == 1 and base["sampled"]["pass"]["k"] == 2 and base["sampled"]["episodes"] == 2
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")}
    assert set(records) == {f"{c}-s0" for c in conditions}
    for name, r in records.items():
        cfg = r["trainer_config"]
        for field, value in bench.CONDITIONS[name.removesuffix("-s0")].items():  # the condition's change was applied
            assert cfg[field] == value, (name, field)
        assert cfg["seed"] == 0 and cfg["max_steps"] == 1 and cfg["recompute_activations"] is True
        # the same batch in every condition: 2 groups of 2 (the smoke's size), async drains a queue of 2
        assert cfg["min_groups_per_step"] == cfg["max_groups_per_step"] == cfg["queue_capacity_groups"] == 2
        (step,) = r["steps"]
        assert step["rollout/episodes"] == 4 and 0.0 <= step["rollout/mixed_reward_groups"] <= 1.0
        assert step["loss/log_ratio_abs_max"] >= 0.0 and "loss/free_log_ratio_over_1" in step
        assert r["trained"]["episodes"] == 1 and r["sampled"]["pass"]["samples"] == 1
        assert r["memory"]["peak_rss_gb"] > 0 and r["memory"]["samples"] >= 2
    full = records["async-lag-s0"]["trainer_config"]
    assert full["rollout_mode"] == "async" and full["lagging_fraction"] > 0 and full["task_advantage_norm"] is True
    sync = records["sync-nolag-s0"]["trainer_config"]
    assert sync["rollout_mode"] == "sync" and sync["lagging_fraction"] == 0.0 and sync["task_advantage_norm"] is True
    assert set(summary["conditions"]) == set(conditions) and summary["effects"] == {}  # no named pair among the two
    again = bench.main(argv)  # resumable: every record found
    assert again["conditions"]["async-lag"]["heldout_mean_reward"] == summary["conditions"]["async-lag"]["heldout_mean_reward"]
