"""A short version of `make train-demo`: the same run (db + os easy splits, SmolLM2 + LoRA, async
with one lagging engine, base and trained held-out evaluations) at a tiny size."""

from __future__ import annotations

import json
import math
import os

import pytest

from agentrl_envs.sandbox.bwrap import missing_requirements
from agentrl_envs.sandbox.rootfs import default_rootfs_path

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def os_sandbox() -> None:
    problem = missing_requirements(default_rootfs_path())
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem)
        pytest.skip(problem + ' (run: eval "$(sudo .ci/os-sandbox.sh | tail -n1)")')


def test_short_train_demo_writes_the_run_and_the_curve(tmp_path, os_sandbox) -> None:
    from agentrl_trainer.demo import main

    run = main(
        [
            "--out", str(tmp_path),
            "--tasks", "db", "os",
            "--eval-samples", "2",
            "--max-steps", "2",
            "--group-size", "2",
            "--groups-per-step", "2",
            "--max-turn-tokens", "12",
            "--max-turns", "2",
            "--train-seconds", "600",
            "--lag-steps", "2",
            "--lagging-prob", "0.5",
            "--bfcl-limit", "2",
            "--bfcl-max-tokens", "16",
            "--record", str(tmp_path / "record"),
        ]
    )  # fmt: skip
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["improved"] == run["improved"]
    for key in ("base", "trained"):
        ev = saved[key]
        assert ev["episodes"] == 4 and ev["infra_failures"] == 0
        assert set(ev["per_task"]) == {"db", "os"}
        assert 0.0 <= ev["success_rate"] <= 1.0
    steps = saved["steps"]
    assert [s["step"] for s in steps] == [1.0, 2.0]
    for s in steps:
        assert s["rollout/episodes"] >= 2 and s["rollout/trained_tokens"] > 0
        assert math.isfinite(s["loss"])
        assert 0.0 <= s["rollout/lagging_turn_fraction"] <= 1.0
    # Step 1 trains only on turns of the initial weights (version 0). By step 2 the current engine
    # holds step 1's weights and the lagging one (lag_steps 2) still step 0's: no turn is older than 1.
    assert steps[0]["rollout/staleness_max"] == 0.0 and steps[0]["rollout/staleness_mean"] == 0.0
    assert steps[1]["rollout/staleness_max"] in (0.0, 1.0)
    assert 0.0 <= steps[1]["rollout/staleness_mean"] <= steps[1]["rollout/staleness_max"]
    assert saved["combined_stderr"] >= 0 and saved["improvement"] == pytest.approx(
        saved["trained"]["mean_reward"] - saved["base"]["mean_reward"]
    )
    # BFCL, held out (never trained on): the same entries played before and after training
    bfcl = saved["bfcl"]
    assert bfcl["base"]["indices"] == bfcl["trained"]["indices"] and len(bfcl["base"]["indices"]) == 2
    for key in ("base", "trained"):
        b = bfcl[key]
        assert b["split"] == "non_live_python" and b["episodes"] == 2 and b["infra_failures"] == 0
        assert sum(c["n"] for c in b["categories"].values()) == 2 and 0.0 <= b["category_score"] <= 1.0
    readme = (tmp_path / "record" / "README.md").read_text()  # --record's page says both
    assert "BFCL (held out, never trained on; split non_live_python, first 2 entries" in readme and "Peak RSS" in readme
    # the whole process tree's peak RSS, sampled through the run
    mem = saved["memory"]
    assert 0 < mem["peak_rss_gb"] < 24 and mem["samples"] >= 2 and mem["peak_phase"] in mem["peak_rss_gb_by_phase"]
    png = tmp_path / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
