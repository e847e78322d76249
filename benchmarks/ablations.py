"""AgentRL's ablations in miniature on the CPU: does each of its three ideas change the outcome?

    .venv/bin/python benchmarks/ablations.py [--conditions full no-task-norm no-lagging sync]
        [--seeds 0 1 2] [--steps 30] [--eval-split easy-test] [--eval-samples 60]
        [--out benchmarks/results/ablations]

Four conditions, each trained from the same base model with the same budget in optimizer steps
(this machine's speed drifts 2x by itself, so never in wall time), the same seeds and otherwise
the settings of ``make train-demo`` (``agentrl_trainer.demo``: SmolLM2-135M-Instruct + LoRA on
the five tasks' ``easy`` splits, equal draws):

* ``full`` — async rollout/training, one of two engines lagging (cross-policy sampling), task
  advantage normalization;
* ``no-task-norm`` — the same without task advantage normalization (group normalization only);
* ``no-lagging`` — the same with both engines current (no cross-policy sampling);
* ``sync`` — the same with synchronous rollout (each step waits for a full batch generated now).

Each run is then evaluated greedily on ``--eval-samples`` samples per task of ``--eval-split``;
the base model is evaluated once the same way (greedy decoding is deterministic). Every run writes
``<out>/runs/<condition>-s<seed>.json`` (its full config, the per-step training metrics, the
held-out table, trajectories/s and the engines' idle fraction) as soon as it ends; a run whose
record exists is skipped, so the script resumes where it stopped. ``<out>/summary.json`` and the
printed table aggregate over seeds: the mean of the runs' held-out mean rewards ± the standard
error over seeds, per task too, and for each idea the gap ``full - ablated`` against the
comparison rule written in ``<out>/README.md`` before the runs.

Each run trains in a fresh child process (``--in-process`` keeps them in this one): a run's
trainer, engines and allocator arenas hold ~18 GB at the peak on the CPU, returned only when its
process ends. ``--smoke`` runs one optimizer step per condition on tiny settings (the test suite
runs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "ablations"

#: condition -> AgentRLConfig fields that differ from the demo's ("full")
CONDITIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no-task-norm": {"task_advantage_norm": False},
    "no-lagging": {"lagging_fraction": 0.0},
    "sync": {"rollout_mode": "sync"},
}
#: idea -> the condition that removes it
IDEAS = {"task advantage normalization": "no-task-norm", "lagging engines": "no-lagging", "async rollout": "sync"}
#: idea -> the figures compared besides the held-out mean reward (README's rule: same 2 x SE test)
SECONDARY = {
    "task advantage normalization": ("weakest_task_gain", "task_gain_spread"),
    "async rollout": ("trajectories_per_s", "engine_idle_fraction"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per run (the same for every condition)")
    p.add_argument("--tasks", nargs="+", default=None, help="default: the demo's (all five)")
    p.add_argument("--eval-split", default="easy-test")
    p.add_argument("--eval-samples", type=int, default=60, help="held-out samples per task (one greedy episode each)")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--smoke", action="store_true", help="one step per condition, tiny settings (for tests)")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="train every run in this process (default: each run in a fresh child process, so that one "
        "run's memory, ~18 GB at the peak on the CPU, is returned before the next starts)",
    )
    p.add_argument("--run-one", nargs=2, metavar=("CONDITION", "SEED"), help=argparse.SUPPRESS)
    p.add_argument(
        "demo_args",
        nargs=argparse.REMAINDER,
        help="after --: further arguments for the demo's settings (e.g. -- --group-size 4)",
    )
    a = p.parse_args(argv)
    if a.steps < 1 or a.eval_samples < 1:
        p.error("--steps and --eval-samples must be at least 1")
    return a


def demo_namespace(a: argparse.Namespace) -> argparse.Namespace:
    """The demo's settings for these runs (its defaults, then ``a.demo_args``)."""
    from agentrl_trainer.demo import parse_args as demo_parse

    extra = [x for x in a.demo_args if x != "--"]
    base = ["--eval-split", a.eval_split, "--eval-samples", str(a.eval_samples), "--max-steps", str(a.steps)]
    if a.tasks:
        base += ["--tasks", *a.tasks]
    if a.smoke:
        base += ["--group-size", "2", "--groups-per-step", "2", "--max-turn-tokens", "16", "--max-turns", "2"]
    return demo_parse(base + extra)


def _mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def run_one(a: argparse.Namespace, condition: str, seed: int, out: Path, base_path: Path) -> dict[str, Any]:
    """Train one (condition, seed) and evaluate it; writes and returns its record."""
    from agentrl_trainer.demo import git_state, train_and_evaluate

    d = demo_namespace(a)
    d.seed = seed
    base = None
    if base_path.exists():  # evaluated by an earlier run of this sweep: it must be the same held-out set
        recorded = json.loads(base_path.read_text())
        if sorted(recorded["samples"]) != sorted(d.tasks) or any(len(v) != d.eval_samples for v in recorded["samples"].values()):
            raise SystemExit(f"{base_path} was evaluated on other tasks or sample counts; use another --out")
        base = recorded["eval"]
    o = train_and_evaluate(d, out / "work" / f"{condition}-s{seed}", overrides=CONDITIONS[condition], base=base)
    if base is None:
        base_path.write_text(json.dumps({"samples": o.samples, "eval": o.base}, indent=1))
    trainer, args, trained, train_seconds = o.trainer, o.args, o.trained, o.train_seconds
    steps = trainer.step_log
    episodes = sum(s.get("rollout/episodes", 0) for s in steps)
    idle = [s["rollout/engine_idle_fraction"] for s in steps if "rollout/engine_idle_fraction" in s]
    record = {
        "condition": condition,
        "seed": seed,
        "overrides": CONDITIONS[condition],
        "demo_settings": {k: v for k, v in vars(d).items() if k not in ("out", "record")},
        "trainer_config": json.loads(args.to_json_string()),
        "git": git_state(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "steps": steps,
        "train_seconds": train_seconds,
        "episodes_trained": episodes,
        "trajectories_per_s": episodes / train_seconds if train_seconds > 0 else math.nan,
        "engine_idle_fraction": idle[-1] if idle else math.nan,  # the pipeline's, over the whole run
        "trained": trained,
    }
    path = out / "runs" / f"{condition}-s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return record


def child_process(argv: list[str] | None, flags: list[str], script: Path | None = None) -> int:
    """``script`` (this file by default) in a fresh Python process with this process's arguments
    (``argv``) and ``flags`` (before the demo's arguments after ``--``); returns its exit code.
    Interrupted here (Ctrl-C, SIGTERM), it stops the child: SIGTERM, which stops the child's
    controller, workers and engines, then SIGKILL after 60 s."""
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)  # the demo's extra arguments stay last
    proc = subprocess.Popen([sys.executable, str((script or Path(__file__)).resolve()), *args[:cut], *flags, *args[cut:]])
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def run_child(argv: list[str] | None, condition: str, seed: int, out: Path, script: Path | None = None) -> dict[str, Any]:
    """``run_one`` in a fresh Python process (:func:`child_process`); returns the record it wrote."""
    code = child_process(argv, ["--run-one", condition, str(seed)], script)
    path = out / "runs" / f"{condition}-s{seed}.json"
    if code != 0 or not path.exists():
        raise SystemExit(f"run {condition} seed {seed} failed (exit {code}); rerun to resume from the records")
    return json.loads(path.read_text())


def summarize(out: Path, conditions: list[str]) -> dict[str, Any]:
    """Aggregate the run records under ``out`` (see the module doc)."""
    base = json.loads((out / "base.json").read_text())["eval"]
    tasks = list(base["per_task"])
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in conditions}
    for path in sorted((out / "runs").glob("*.json")):
        r = json.loads(path.read_text())
        if r["condition"] in runs:
            runs[r["condition"]].append(r)
    table: dict[str, Any] = {}
    for c, rs in runs.items():
        if not rs:
            continue
        overall = _mean_se([r["trained"]["mean_reward"] for r in rs])
        per_task = {t: _mean_se([r["trained"]["per_task"][t]["mean_reward"] for r in rs]) for t in tasks}
        gains = [[r["trained"]["per_task"][t]["mean_reward"] - base["per_task"][t]["mean_reward"] for t in tasks] for r in rs]
        table[c] = {
            "seeds": [r["seed"] for r in rs],
            "mean_reward": overall,
            "per_task": per_task,
            "weakest_task_gain": _mean_se([min(g) for g in gains]),
            "task_gain_spread": _mean_se([statistics.pstdev(g) for g in gains]),
            "trajectories_per_s": _mean_se([r["trajectories_per_s"] for r in rs]),
            "engine_idle_fraction": _mean_se([r["engine_idle_fraction"] for r in rs]),
            "steps": sorted({len(r["steps"]) for r in rs}),
        }
    verdicts = {}
    if "full" in table:
        for idea, ablated in IDEAS.items():
            if ablated not in table:
                continue
            gap, se = _gap(table["full"]["mean_reward"], table[ablated]["mean_reward"])
            # the same 2 x SE rule; for the reward, higher is better
            direction = _direction(gap, se)
            verdict = {"full higher": "full better", "full lower": "ablated better"}.get(direction, direction)
            verdicts[idea] = {"condition": ablated, "gap": gap, "combined_se": se, "verdict": verdict}
            secondary = {}
            for figure in SECONDARY.get(idea, ()):
                g, e = _gap(table["full"][figure], table[ablated][figure])
                secondary[figure] = {"gap": g, "combined_se": e, "verdict": _direction(g, e)}
            if secondary:
                verdicts[idea]["secondary"] = secondary
    summary = {
        "base": {"mean_reward": base["mean_reward"], "stderr": base["stderr"], "per_task": base["per_task"]},
        "conditions": table,
        "verdicts": verdicts,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _gap(full: tuple[float, float], ablated: tuple[float, float]) -> tuple[float, float]:
    """``full - ablated`` of two (mean, SE) pairs and the combined SE (NaN with one seed)."""
    return full[0] - ablated[0], math.sqrt(full[1] ** 2 + ablated[1] ** 2)


def _direction(gap: float, se: float) -> str:
    """The 2 x SE rule on a figure where higher is not "better" by itself (spread, idle, rate)."""
    if math.isnan(se):
        return "not measured"
    return "full higher" if gap > 2 * se else "full lower" if gap < -2 * se else "no difference"


def render_markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown: the table over conditions (mean ± SE over seeds) and the verdicts."""
    fmt = lambda ms: f"{ms[0]:.3f} ± {ms[1]:.3f}" if not math.isnan(ms[1]) else f"{ms[0]:.3f}"  # noqa: E731
    base = summary["base"]
    tasks = list(base["per_task"])
    lines = [
        f"Base model: {base['mean_reward']:.3f} ± {base['stderr']:.3f} (SE over episodes); "
        + ", ".join(f"{t} {base['per_task'][t]['mean_reward']:.3f}" for t in tasks)
        + ". Below: mean ± SE over seeds (one seed: the mean alone).",
        "",
        "| condition | seeds | steps | held-out mean reward | "
        + " | ".join(tasks)
        + " | weakest-task gain | spread of task gains | trajectories/s | engine idle |",
        "|---|---|---|---|" + "---|" * len(tasks) + "---|---|---|---|",
    ]
    for c, row in summary["conditions"].items():
        cells = [fmt(row["per_task"][t]) for t in tasks]
        lines.append(
            f"| {c} | {len(row['seeds'])} | {'/'.join(map(str, row['steps']))} | {fmt(row['mean_reward'])} | "
            + " | ".join(cells)
            + f" | {fmt(row['weakest_task_gain'])} | {fmt(row['task_gain_spread'])} | "
            f"{fmt(row['trajectories_per_s'])} | {fmt(row['engine_idle_fraction'])} |"
        )
    lines.append("")
    for idea, v in summary["verdicts"].items():
        lines.append(
            f"* **{idea}** (full − {v['condition']}): held-out mean reward {v['gap']:+.3f}, "
            f"2 × combined SE {2 * v['combined_se']:.3f}: **{v['verdict']}**"
        )
        for figure, w in v.get("secondary", {}).items():
            lines.append(
                f"  * {figure.replace('_', ' ')}: {w['gap']:+.3f}, 2 × combined SE {2 * w['combined_se']:.3f}: {w['verdict']}"
            )
    return "\n".join(lines)


def print_summary(summary: dict[str, Any]) -> None:
    print()
    print(render_markdown(summary))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    base_path = out / "base.json"
    from agentrl_trainer.demo import sigterm_unwinds

    with sigterm_unwinds():  # SIGTERM stops a run's controller and workers, in the child or in-process
        if a.run_one:  # the child process of one run (see --in-process)
            run_one(a, a.run_one[0], int(a.run_one[1]), out, base_path)
            return {}
        return sweep(a, argv, out, base_path)


def runs_to_do(a: argparse.Namespace, out: Path) -> Iterator[tuple[str, str, int]]:
    """``(tag, condition, seed)`` of each run of ``a.conditions`` x ``a.seeds`` that has no record
    under ``out/runs`` yet, seed-major (an interrupted sweep has every condition at the first
    seeds); says which it skips and which it starts (``tag``: ``[n/total] condition seed s``)."""
    total = len(a.conditions) * len(a.seeds)
    n = 0
    for seed in a.seeds:
        for condition in a.conditions:
            n += 1
            tag = f"[{n}/{total}] {condition} seed {seed}"
            if (out / "runs" / f"{condition}-s{seed}.json").exists():
                print(f"{tag}: recorded, skipped", flush=True)
                continue
            print(f"{tag}: training {a.steps} steps", flush=True)
            yield tag, condition, seed


def sweep(a: argparse.Namespace, argv: list[str] | None, out: Path, base_path: Path) -> dict[str, Any]:
    """Every (seed, condition) without a record, then the summary."""
    for tag, condition, seed in runs_to_do(a, out):
        started = time.monotonic()
        r = run_one(a, condition, seed, out, base_path) if a.in_process else run_child(argv, condition, seed, out)
        print(
            f"{tag}: held-out {r['trained']['mean_reward']:.3f} ± "
            f"{r['trained']['stderr']:.3f}, {r['trajectories_per_s']:.2f} traj/s, {time.monotonic() - started:.0f} s",
            flush=True,
        )
    summary = summarize(out, a.conditions)
    print_summary(summary)
    return summary


if __name__ == "__main__":
    main()
