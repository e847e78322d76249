"""benchmarks/ablations_v2.py's aggregation on its own: records written by hand give the paired
differences, the 2 x SE verdicts and the async x lagging interaction the README's rule names; the
committed summary.json (once the sweep has run) follows from the committed records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from script_helpers import load_benchmark

TASKS = ("db", "os")
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "ablations-v2"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("ablations_v2")


def write_run(out: Path, condition: str, seed: int, reward: float, pass_k: float, mixed: list[float]) -> None:
    steps = [
        {
            "step": float(i + 1),
            "rollout/episodes": 16.0,
            "rollout/mixed_reward_groups": m,
            "rollout/staleness_mean": 0.5,
            "rollout/staleness_max": 1.0,
            "loss/log_ratio_abs_max": 0.1 * (i + 1),
            "loss/log_ratio_over_1": 0.0,
            "loss/free_log_ratio_abs_max": 2.0,
            "loss/free_log_ratio_over_1": 3.0,
        }
        for i, m in enumerate(mixed)
    ]
    record = {
        "condition": condition,
        "seed": seed,
        "steps": steps,
        "train_seconds": 100.0 * len(steps),
        "trained": {"mean_reward": reward, "per_task": {t: {"mean_reward": reward} for t in TASKS}},
        "sampled": {"pass": {"pass_at_k": pass_k}},
        "memory": {"peak_rss_gb": 5.0 + seed / 10},
    }
    path = out / "runs" / f"{condition}-s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_paired_differences_verdicts_and_the_interaction(tmp_path: Path, bench) -> None:
    base = {"mean_reward": 0.3, "stderr": 0.04, "per_task": {t: {"mean_reward": 0.3} for t in TASKS}}
    (tmp_path / "base.json").write_text(json.dumps({"samples": {}, "eval": base, "sampled": {"pass": {"pass_at_k": 0.5}}}))
    seed_level = (0.0, 0.1, 0.2)  # seeds differ a lot in level, the paired differences little
    for s, lvl in enumerate(seed_level):
        j = 0.01 * (s - 1)  # the pairs' own spread, far below the seeds' levels
        write_run(tmp_path, "async-lag", s, 0.50 + lvl, 0.70 + lvl, [0.5, 0.7])
        write_run(tmp_path, "async-nolag", s, 0.40 + lvl + j, 0.60 + lvl, [0.5, 0.5])  # lagging +0.1 under async
        write_run(tmp_path, "sync-lag", s, 0.45 + lvl, 0.65 + lvl + j, [0.4, 0.6])
        write_run(tmp_path, "sync-nolag", s, 0.45 + lvl + 2 * j, 0.65 + lvl, [0.4, 0.6])  # lagging 0 under sync
        write_run(tmp_path, "async-lag-notn", s, 0.50 + lvl + j, 0.70 + lvl, [0.5, 0.7])

    summary = bench.summarize(tmp_path)
    c = summary["conditions"]["async-lag"]
    assert c["seeds"] == [0, 1, 2] and c["steps"] == [2] and c["episodes_per_step"] == [16]
    assert c["heldout_mean_reward"][0] == pytest.approx(0.6)
    assert c["heldout_mean_reward"][1] == pytest.approx(0.1 / math.sqrt(3))  # the seeds' levels: SE over seeds
    assert c["mixed_reward_groups"][0] == pytest.approx(0.6)  # per run the mean over steps
    assert c["log_ratio_abs_max"][0] == pytest.approx(0.2) and c["free_log_ratio_over_1"][0] == pytest.approx(6.0)
    assert c["train_seconds_per_step"][0] == pytest.approx(100.0) and c["peak_rss_gb"][0] == pytest.approx(5.1)

    e = summary["effects"]
    lag_async = e["lagging, under async"]["heldout_mean_reward"]
    assert lag_async["diffs"] == pytest.approx([0.11, 0.10, 0.09])  # paired by seed: the levels cancel
    assert lag_async["mean"] == pytest.approx(0.10) and lag_async["se"] == pytest.approx(0.01 / math.sqrt(3))
    assert lag_async["verdict"] == "higher"
    # an unpaired comparison of these means would see SE 0.058 per condition: no difference
    assert e["lagging, under sync"]["heldout_mean_reward"]["verdict"] == "no difference"
    assert e["lagging, under async"]["mixed_reward_groups"]["mean"] == pytest.approx(0.1)
    assert e["lagging, under async"]["mixed_reward_groups"]["verdict"] == "higher"  # the same +0.1 in every seed
    assert e["task normalization"]["heldout_mean_reward"]["verdict"] == "no difference"
    assert e["async, with lagging"]["pass_at_k"]["mean"] == pytest.approx(0.05 - 0.0)

    inter = summary["two_by_two"]["async x lagging interaction"]["heldout_mean_reward"]
    # (async-lag − async-nolag) − (sync-lag − sync-nolag) per seed: (0.1 − j) − (−2j)
    assert inter["diffs"] == pytest.approx([0.09, 0.10, 0.11])
    assert inter["mean"] == pytest.approx(0.10) and inter["verdict"] == "higher"
    main_lag = summary["two_by_two"]["lagging, main effect"]["heldout_mean_reward"]
    assert main_lag["mean"] == pytest.approx(0.05)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["effects"]["lagging, under async"]["heldout_mean_reward"]["verdict"] == "higher"
    table = bench.render_markdown(summary)
    assert "| async-lag | 3 | 2 | 16 | 0.600 ± 0.058 |" in table
    assert "async x lagging interaction" in table and "+0.100 ± 0.006: **higher**" in table
    verdicts = bench.render_verdicts(summary)
    assert "| lagging, under async (async-lag − async-nolag) | higher | higher | higher |" in verdicts
    assert "| async x lagging interaction | higher |" in verdicts and "main effect" not in verdicts
    # the project README still fits its line limit (tests/test_readme.py) once every effect has a verdict
    readme = tmp_path / "project-README.md"
    readme.write_text((ROOT / "README.md").read_text())
    bench.write_summary_blocks(readme, summary)
    assert verdicts in readme.read_text() and len(readme.read_text().splitlines()) <= 300


def test_one_seed_gives_no_verdict(tmp_path: Path, bench) -> None:
    base = {"mean_reward": 0.3, "stderr": 0.04, "per_task": {t: {"mean_reward": 0.3} for t in TASKS}}
    (tmp_path / "base.json").write_text(json.dumps({"samples": {}, "eval": base, "sampled": None}))
    write_run(tmp_path, "async-lag", 0, 0.5, 0.7, [0.5])
    write_run(tmp_path, "async-nolag", 0, 0.4, 0.6, [0.5])
    summary = bench.summarize(tmp_path)
    v = summary["effects"]["lagging, under async"]["heldout_mean_reward"]
    assert v["verdict"] == "not measured" and math.isnan(v["se"])
    assert (
        "| lagging, under async (async-lag − async-nolag) | +0.100: **not measured** | +0.100: **not measured** |"
        in bench.render_effects(summary)
    )
    assert (
        "| lagging, under async (async-lag − async-nolag) | not measured | not measured | not measured |"
        in bench.render_verdicts(summary)
    )
    assert summary["two_by_two"] == {} and summary["base"]["pass_at_k"] is None


def test_summarize_fills_only_the_blocks_and_needs_their_markers(tmp_path: Path, bench) -> None:
    """``--summarize`` runs nothing: summary.json, the README's summary block and the blocks of the
    files ``--docs`` names follow from the records (here one seed of two conditions, as after a
    first session of the sweep)."""
    base = {"mean_reward": 0.3, "stderr": 0.04, "per_task": {t: {"mean_reward": 0.3} for t in TASKS}}
    (tmp_path / "base.json").write_text(json.dumps({"samples": {}, "eval": base, "sampled": None}))
    write_run(tmp_path, "async-lag", 0, 0.5, 0.7, [0.5])
    write_run(tmp_path, "sync-nolag", 0, 0.4, 0.6, [0.5])
    readme = tmp_path / "README.md"
    readme.write_text("# rule\n\n## Results\n\n<!-- summary -->\nnone yet\n<!-- /summary -->\n\nafter\n")
    doc = tmp_path / "doc.md"  # an empty block too: filled all the same
    doc.write_text("top\n<!-- verdicts -->\n<!-- /verdicts -->\nmiddle\n<!-- summary -->\nold\n<!-- /summary -->\n")
    summary = bench.main(["--summarize", "--out", str(tmp_path), "--docs", str(doc)])
    assert set(summary["conditions"]) == {"async-lag", "sync-nolag"}
    verdicts, full = bench.render_verdicts(summary), bench.render_markdown(summary)
    assert (
        doc.read_text()
        == f"top\n<!-- verdicts -->\n{verdicts}\n<!-- /verdicts -->\nmiddle\n<!-- summary -->\n{full}\n<!-- /summary -->\n"
    )
    assert verdicts.startswith("None yet")  # async-lag and sync-nolag pair in no effect
    assert json.loads((tmp_path / "summary.json").read_text())["conditions"]["async-lag"]["seeds"] == [0]
    text = readme.read_text()
    assert text.startswith("# rule\n\n## Results\n\n") and text.endswith("\n<!-- /summary -->\n\nafter\n")
    block = text.split("<!-- summary -->\n", 1)[1].split("\n<!-- /summary -->", 1)[0]
    assert block == bench.render_markdown(summary) and "| sync-nolag | 1 | 1 | 16 | 0.400 |" in block
    assert not (tmp_path / "runs" / "async-nolag-s0.json").exists()  # nothing ran
    readme.write_text("# rule without the block\n")
    with pytest.raises(SystemExit, match="has no block to fill"):
        bench.main(["--summarize", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # --docs without --summarize: an argparse error, nothing run
        bench.main(["--out", str(tmp_path), "--docs", str(doc)])


@pytest.mark.skipif(not (RESULTS / "summary.json").exists(), reason="the v2 sweep has not run yet")
def test_the_committed_summary_follows_from_the_committed_records(tmp_path: Path, bench) -> None:
    import shutil

    shutil.copy(RESULTS / "base.json", tmp_path / "base.json")
    shutil.copytree(RESULTS / "runs", tmp_path / "runs")
    recomputed = bench.summarize(tmp_path)
    committed = json.loads((RESULTS / "summary.json").read_text())
    assert json.dumps(recomputed, sort_keys=True) == json.dumps(committed, sort_keys=True)
    # the results README and the docs show these figures (--summarize --docs docs/trainer.md README.md):
    # filling their blocks again from the recomputed summary changes nothing
    for doc, block in (
        (RESULTS / "README.md", "summary"),
        (ROOT / "docs" / "trainer.md", "summary"),
        (ROOT / "README.md", "verdicts"),
    ):
        copy = tmp_path / "doc.md"
        copy.write_text(doc.read_text())
        bench.write_summary_blocks(copy, recomputed)
        assert f"<!-- {block} -->" in doc.read_text() and copy.read_text() == doc.read_text(), doc
