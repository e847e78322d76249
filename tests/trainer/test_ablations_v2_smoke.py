"""A short version of benchmarks/ablations_v2.py: the base evaluation and one optimizer step of
async-lag (the demo's trainer) on the db task (one held-out sample, pass@2), each in its own child
process, then the summary; a second call resumes from the records and trains nothing. The other
conditions are config overrides of the same demo settings: their configs are built (not trained)
and checked here; the summary's effects and verdicts are tested on records written by hand
(test_ablations_v2_summary.py). One trained condition rather than two keeps this test to two
child processes (and --smoke plays no BFCL, whose figures the records do not keep); sync mode's
training path is tested in test_pipeline.py and test_seeded_rollout.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("ablations_v2")


@pytest.mark.parametrize("smoke", [False, True], ids=["sweep", "smoke"])
def test_every_condition_is_its_override_on_the_same_fixed_batch(tmp_path: Path, bench, smoke: bool) -> None:
    from agentrl_trainer.demo import trainer_config

    a = bench.parse_args(["--smoke"] if smoke else [])
    d = bench.demo_namespace(a, tmp_path)
    groups = 2 if smoke else 4
    configs = {c: trainer_config(d, tmp_path, **bench.CONDITIONS[c]) for c in bench.CONDITIONS}
    full = configs["async-lag"]
    base = full.to_dict()
    assert full.rollout_mode == "async" and full.lagging_fraction > 0 and full.task_advantage_norm is True
    for name, cfg in configs.items():
        # each condition is async-lag with its override's fields changed, and nothing else
        changed = {k: v for k, v in cfg.to_dict().items() if v != base[k]}
        assert changed == bench.CONDITIONS[name], name
        # the same batch in every condition; async drains a queue of one step's batch
        assert cfg.num_generations == groups and cfg.max_steps == a.steps
        assert cfg.min_groups_per_step == cfg.max_groups_per_step == cfg.queue_capacity_groups == groups
        assert cfg.recompute_activations is True


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_one_step_writes_the_base_and_run_records_and_the_summary(tmp_path: Path, bench) -> None:
    argv = ["--smoke", "--tasks", "db", "--seeds", "0", "--steps", "1", "--eval-samples", "1", "--pass-k", "2"]
    argv += ["--conditions", "async-lag", "--out", str(tmp_path)]
    summary = bench.main(argv)

    base = json.loads((tmp_path / "base.json").read_text())
    assert base["eval"]["episodes"] == 1 and base["sampled"]["pass"]["k"] == 2 and base["sampled"]["episodes"] == 2
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json")}
    assert set(records) == {"async-lag-s0"}
    r = records["async-lag-s0"]
    cfg = r["trainer_config"]
    assert cfg["seed"] == 0 and cfg["max_steps"] == 1 and cfg["recompute_activations"] is True
    assert cfg["rollout_mode"] == "async" and cfg["lagging_fraction"] > 0 and cfg["task_advantage_norm"] is True
    assert cfg["min_groups_per_step"] == cfg["max_groups_per_step"] == cfg["queue_capacity_groups"] == 2
    (step,) = r["steps"]
    assert step["rollout/episodes"] == 4 and 0.0 <= step["rollout/mixed_reward_groups"] <= 1.0
    assert step["loss/log_ratio_abs_max"] >= 0.0 and "loss/free_log_ratio_over_1" in step
    assert r["trained"]["episodes"] == 1 and r["sampled"]["pass"]["samples"] == 1
    assert r["memory"]["peak_rss_gb"] > 0 and r["memory"]["samples"] >= 2
    assert set(summary["conditions"]) == {"async-lag"} and summary["effects"] == {}  # no pair among one condition
    assert summary["conditions"]["async-lag"]["heldout_mean_reward"][0] == r["trained"]["mean_reward"]
    again = bench.main(argv)  # resumable: every record found, nothing trained
    assert json.dumps(again, sort_keys=True) == json.dumps(summary, sort_keys=True)  # NaN SEs of one seed
    assert json.loads((tmp_path / "runs" / "async-lag-s0.json").read_text()) == r
