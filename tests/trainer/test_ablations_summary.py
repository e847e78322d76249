"""benchmarks/ablations.py's aggregation on its own: records written by hand, the verdicts of the
comparison rule (2 x combined SE over seeds) and the Markdown the README takes; the committed
summary.json and results README agree with the committed run records."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from script_helpers import load_benchmark

TASKS = ("db", "os")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("ablations")


def write_run(out: Path, condition: str, seed: int, per_task: dict[str, float], rate: float, idle: float) -> None:
    record = {
        "condition": condition,
        "seed": seed,
        "steps": [{"step": float(i + 1)} for i in range(12)],
        "trajectories_per_s": rate,
        "engine_idle_fraction": idle,
        "trained": {
            "mean_reward": sum(per_task.values()) / len(per_task),
            "per_task": {t: {"mean_reward": v} for t, v in per_task.items()},
        },
    }
    path = out / "runs" / f"{condition}-s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_verdicts_follow_the_two_se_rule(tmp_path: Path, bench) -> None:
    base = {"mean_reward": 0.25, "stderr": 0.05, "per_task": {"db": {"mean_reward": 0.4}, "os": {"mean_reward": 0.1}}}
    (tmp_path / "base.json").write_text(json.dumps({"samples": {}, "eval": base}))
    jitter = (-0.01, 0.0, 0.01)  # the same small spread over seeds in every condition: SE 0.00577
    for seed, j in enumerate(jitter):
        write_run(tmp_path, "full", seed, {"db": 0.6 + j, "os": 0.4 + j}, rate=0.10 + j, idle=0.2)
        # without task normalization: the same mean, but the weak task (os) gains nothing, the strong one more
        write_run(tmp_path, "no-task-norm", seed, {"db": 0.9 + j, "os": 0.1 + j}, rate=0.10 + j, idle=0.2)
        write_run(tmp_path, "no-lagging", seed, {"db": 0.6 + j, "os": 0.4 + 2 * j}, rate=0.10, idle=0.2)
        write_run(tmp_path, "sync", seed, {"db": 0.7 + j, "os": 0.5 + j}, rate=0.05 + j, idle=0.6)

    summary = bench.summarize(tmp_path, list(bench.CONDITIONS))
    full = summary["conditions"]["full"]
    assert full["seeds"] == [0, 1, 2] and full["steps"] == [12]
    assert full["mean_reward"][0] == pytest.approx(0.5) and full["mean_reward"][1] == pytest.approx(0.01 / math.sqrt(3))
    assert full["weakest_task_gain"][0] == pytest.approx(0.2)  # db +0.2, os +0.3
    v = summary["verdicts"]
    assert v["task advantage normalization"]["verdict"] == "no difference"  # means 0.5 and 0.5
    assert v["task advantage normalization"]["gap"] == pytest.approx(0.0, abs=1e-12)
    tn = v["task advantage normalization"]["secondary"]
    # weakest-task gain: full +0.2 (db), no-task-norm 0.0 (os): full higher; spread: 0.05 vs 0.25: full lower
    assert tn["weakest_task_gain"]["verdict"] == "full higher" and tn["weakest_task_gain"]["gap"] == pytest.approx(0.2)
    assert tn["task_gain_spread"]["verdict"] == "full lower" and tn["task_gain_spread"]["gap"] == pytest.approx(-0.2)
    assert v["lagging engines"]["verdict"] == "no difference" and "secondary" not in v["lagging engines"]
    assert v["async rollout"]["verdict"] == "ablated better" and v["async rollout"]["gap"] == pytest.approx(-0.1)
    sync = v["async rollout"]["secondary"]
    assert sync["trajectories_per_s"]["verdict"] == "full higher" and sync["engine_idle_fraction"]["verdict"] == "full lower"
    # no difference when the gap is inside 2 x SE, even if it is larger than one SE
    assert bench._direction(0.015, 0.01) == "no difference" and bench._direction(0.025, 0.01) == "full higher"

    md = bench.render_markdown(summary)
    assert "| full | 3 | 12 | 0.500 ± 0.006 | 0.600 ± 0.006 | 0.400 ± 0.006 |" in md
    assert "* **async rollout** (full − sync): held-out mean reward -0.100, 2 × combined SE 0.016: **ablated better**" in md
    assert "  * weakest task gain: +0.200, 2 × combined SE 0.016: full higher" in md
    assert json.loads((tmp_path / "summary.json").read_text())["verdicts"]["async rollout"]["verdict"] == "ablated better"


def test_one_seed_gives_no_verdict(tmp_path: Path, bench) -> None:
    base = {"mean_reward": 0.25, "stderr": 0.05, "per_task": {t: {"mean_reward": 0.25} for t in TASKS}}
    (tmp_path / "base.json").write_text(json.dumps({"samples": {}, "eval": base}))
    for c in bench.CONDITIONS:
        write_run(tmp_path, c, 0, {t: 0.5 for t in TASKS}, rate=0.1, idle=0.2)
    summary = bench.summarize(tmp_path, list(bench.CONDITIONS))
    assert {v["verdict"] for v in summary["verdicts"].values()} == {"not measured"}
    assert summary["verdicts"]["async rollout"]["secondary"]["trajectories_per_s"]["verdict"] == "not measured"
    assert "| sync | 1 | 12 | 0.500 | 0.500 | 0.500 |" in bench.render_markdown(summary)  # one seed: the mean alone


COMMITTED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "ablations"


def test_committed_summary_and_readme_table_come_from_the_committed_records(tmp_path: Path, bench) -> None:
    """summary.json is the aggregate of the committed run records, and the results README shows
    its table and verdicts verbatim: neither can be edited by hand without this failing."""
    shutil.copy(COMMITTED / "base.json", tmp_path / "base.json")
    shutil.copytree(COMMITTED / "runs", tmp_path / "runs")
    again = bench.summarize(tmp_path, list(bench.CONDITIONS))
    assert (tmp_path / "summary.json").read_text() == (COMMITTED / "summary.json").read_text()
    assert bench.render_markdown(again) in (COMMITTED / "README.md").read_text()
