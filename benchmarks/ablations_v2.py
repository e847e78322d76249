"""AgentRL's ablations, second design (issue 39): async x lagging with task normalization on, and
async + lagging without it, paired by seed, the same episodes in every optimizer step.

    .venv/bin/python benchmarks/ablations_v2.py [--conditions ...] [--seeds 0 1 2] [--steps 12]
        [--eval-split easy-test] [--eval-samples 30] [--pass-k 4] [--out benchmarks/results/ablations-v2]

The rule, the settings and the figures are in ``<out>/README.md``, written before any run. Every
run trains in a fresh child process (``make train-demo``'s settings through
:func:`agentrl_trainer.demo.train_and_evaluate`, with groups of 4 and exactly 4 groups a step:
``--groups-per-step 4 --min-groups-per-step 4``, so async drains a queue whose capacity is one
step's batch), then evaluates the trained model greedily and with ``--pass-k`` episodes per
held-out sample at temperature 0.7. It writes ``<out>/runs/<condition>-s<seed>.json`` (the
config, every step's metrics, the importance-ratio outliers, both evaluations, the peak RSS of
the run's process tree, the machine's load) as soon as it ends; a run whose record exists is
skipped, so the same command resumes. The base model is evaluated once the same way
(``<out>/base.json``). ``<out>/summary.json`` (:func:`summarize`) follows from the records alone.
``--summarize`` runs nothing: it recomputes ``summary.json`` and the README's summary block
from the records (after copying a session's records in); ``--docs docs/trainer.md README.md``
fills those files' blocks too (:func:`write_summary_blocks`). ``--smoke`` runs one step per condition
on tiny settings (the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ablations import child_process, run_child, runs_to_do  # noqa: E402  (a script beside this one: the child-process runner)

RESULTS = Path(__file__).parent / "results" / "ablations-v2"

#: condition -> AgentRLConfig fields that differ from async-lag (the demo's trainer)
CONDITIONS: dict[str, dict[str, Any]] = {
    "async-lag": {},
    "async-nolag": {"lagging_fraction": 0.0},
    "sync-lag": {"rollout_mode": "sync"},
    "sync-nolag": {"rollout_mode": "sync", "lagging_fraction": 0.0},
    "async-lag-notn": {"task_advantage_norm": False},
}
#: effect -> (condition with the idea, condition without it): a paired difference per seed
EFFECTS: dict[str, tuple[str, str]] = {
    "lagging, under async": ("async-lag", "async-nolag"),
    "lagging, under sync": ("sync-lag", "sync-nolag"),
    "async, with lagging": ("async-lag", "sync-lag"),
    "async, without lagging": ("async-nolag", "sync-nolag"),
    "task normalization": ("async-lag", "async-lag-notn"),
}
#: per-run figures the rule compares (README: how each is computed)
FIGURES = ("heldout_mean_reward", "pass_at_k", "mixed_reward_groups")
#: per-run figures reported beside them, without a verdict
REPORTED = (
    "staleness_mean",
    "staleness_max",
    "log_ratio_abs_max",
    "log_ratio_over_1",
    "free_log_ratio_abs_max",
    "free_log_ratio_over_1",
    "train_seconds_per_step",
    "peak_rss_gb",
)
#: the fixed batch of every condition (the demo's flags)
BATCH = ["--group-size", "4", "--groups-per-step", "4", "--min-groups-per-step", "4"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=12, help="optimizer steps per run (the same for every condition)")
    p.add_argument("--tasks", nargs="+", default=None, help="default: the demo's (all five)")
    p.add_argument("--eval-split", default="easy-test")
    p.add_argument("--eval-samples", type=int, default=30, help="held-out samples per task")
    p.add_argument("--pass-k", type=int, default=4, help="sampled episodes per held-out sample for pass@k (0: none)")
    p.add_argument("--pass-temperature", type=float, default=0.7)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--smoke", action="store_true", help="one step per condition, tiny settings, no BFCL (for tests)")
    p.add_argument(
        "--summarize",
        action="store_true",
        help="run nothing: recompute <out>/summary.json from the records and the README's summary block",
    )
    p.add_argument(
        "--docs",
        nargs="+",
        default=[],
        metavar="MD",
        help="with --summarize: further Markdown files whose summary blocks to fill (docs/trainer.md, README.md)",
    )
    p.add_argument("--run-one", nargs=2, metavar=("CONDITION", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--run-base", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("demo_args", nargs=argparse.REMAINDER, help="after --: further arguments for the demo's settings")
    a = p.parse_args(argv)
    if a.docs and not a.summarize:
        p.error("--docs goes with --summarize")
    if a.steps < 1 or a.eval_samples < 1 or a.pass_k < 0:
        p.error("--steps and --eval-samples must be at least 1, --pass-k at least 0")
    return a


def demo_namespace(a: argparse.Namespace, out: Path) -> argparse.Namespace:
    """The demo's settings for these runs: its defaults, the fixed batch, then ``a.demo_args``."""
    from agentrl_trainer.demo import parse_args as demo_parse

    base = ["--out", str(out), "--eval-split", a.eval_split, "--eval-samples", str(a.eval_samples)]
    base += ["--max-steps", str(a.steps), *BATCH]
    if a.tasks:
        base += ["--tasks", *a.tasks]
    if a.smoke:
        base += ["--group-size", "2", "--groups-per-step", "2", "--min-groups-per-step", "2"]
        base += ["--max-turn-tokens", "16", "--max-turns", "2"]
        # the records keep no BFCL figures; the demo's 20 entries before and after training took
        # 72 of the smoke test's 153 s (81 s without them, the same machine, one after the other)
        base += ["--bfcl-limit", "0"]
    return demo_parse(base + [x for x in a.demo_args if x != "--"])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_base(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Evaluate the base model (greedy, and pass@k) once; writes ``base.json``."""
    from agentrl_trainer.demo import evaluate_base, git_state
    from agentrl_trainer.memory import TreeMemory

    d = demo_namespace(a, out / "work" / "base")
    with TreeMemory() as memory:
        samples, greedy, sampled = evaluate_base(d, pass_k=a.pass_k, pass_temperature=a.pass_temperature, memory=memory)
    record = {"samples": samples, "eval": greedy, "sampled": sampled, "memory": memory.record(), "git": git_state()}
    (out / "base.json").write_text(json.dumps(record, indent=1))
    return record


def run_one(a: argparse.Namespace, condition: str, seed: int, out: Path) -> dict[str, Any]:
    """Train one (condition, seed) and evaluate it; writes and returns its record."""
    from agentrl_trainer.demo import git_state, train_and_evaluate
    from agentrl_trainer.memory import TreeMemory

    base = json.loads((out / "base.json").read_text())
    d = demo_namespace(a, out / "work" / f"{condition}-s{seed}")
    d.seed = seed
    if sorted(base["samples"]) != sorted(d.tasks) or any(len(v) != d.eval_samples for v in base["samples"].values()):
        raise SystemExit(f"{out / 'base.json'} was evaluated on other tasks or sample counts; use another --out")
    started, load_before = _now(), os.getloadavg()
    with TreeMemory() as memory:
        o = train_and_evaluate(
            d,
            Path(d.out),
            overrides=CONDITIONS[condition],
            base=base["eval"],
            memory=memory,
            pass_k=a.pass_k,
            pass_temperature=a.pass_temperature,
        )
    if o.samples != base["samples"]:
        raise SystemExit("the held-out samples differ from base.json's")
    steps = o.trainer.step_log
    record = {
        "condition": condition,
        "seed": seed,
        "overrides": CONDITIONS[condition],
        "demo_settings": {k: v for k, v in vars(d).items() if k not in ("out", "record")},
        "trainer_config": json.loads(o.args.to_json_string()),
        "git": git_state(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "started_utc": started,
        "finished_utc": _now(),
        "load_average": {"start": load_before, "end": os.getloadavg()},
        "steps": steps,
        "ratio_outliers": o.trainer.ratio_outliers,
        "train_seconds": o.train_seconds,
        "episodes_trained": sum(s.get("rollout/episodes", 0) for s in steps),
        "trained": o.trained,
        "sampled": o.sampled,
        "memory": memory.record(),
    }
    path = out / "runs" / f"{condition}-s{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return record


# ---------------------------------------------------------------------------------- summary


def run_figures(r: dict[str, Any]) -> dict[str, float]:
    """One run's figures, from its record alone (README: how each is computed)."""
    steps = r["steps"]

    def over_steps(key: str, how: Any) -> float:
        values = [s[key] for s in steps if key in s]
        return float(how(values)) if values else math.nan

    sampled = r.get("sampled") or {}
    return {
        "heldout_mean_reward": r["trained"]["mean_reward"],
        "pass_at_k": sampled.get("pass", {}).get("pass_at_k", math.nan),
        "mixed_reward_groups": over_steps("rollout/mixed_reward_groups", statistics.fmean),
        "staleness_mean": over_steps("rollout/staleness_mean", statistics.fmean),
        "staleness_max": over_steps("rollout/staleness_max", max),
        "log_ratio_abs_max": over_steps("loss/log_ratio_abs_max", max),
        "log_ratio_over_1": over_steps("loss/log_ratio_over_1", sum),
        "free_log_ratio_abs_max": over_steps("loss/free_log_ratio_abs_max", max),
        "free_log_ratio_over_1": over_steps("loss/free_log_ratio_over_1", sum),
        "train_seconds_per_step": r["train_seconds"] / max(len(steps), 1),
        "peak_rss_gb": r["memory"]["peak_rss_gb"],
    }


def _mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (SD / sqrt(n)); NaN SE with one value."""
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def verdict(mean: float, se: float, higher: str = "higher", lower: str = "lower") -> str:
    """The 2 x SE rule on a mean paired difference."""
    if math.isnan(se):
        return "not measured"
    return higher if mean > 2 * se else lower if mean < -2 * se else "no difference"


def paired(by_seed: dict[str, dict[int, dict[str, float]]], with_: str, without: str, figure: str) -> dict[str, Any]:
    """Per seed run by both conditions: ``with_`` − ``without`` on ``figure``; mean ± SE; verdict."""
    seeds = sorted(set(by_seed.get(with_, {})) & set(by_seed.get(without, {})))
    diffs = [by_seed[with_][s][figure] - by_seed[without][s][figure] for s in seeds]
    mean, se = _mean_se(diffs)
    return {"seeds": seeds, "diffs": diffs, "mean": mean, "se": se, "verdict": verdict(mean, se)}


def summarize(out: Path, conditions: list[str] | None = None) -> dict[str, Any]:
    """Aggregate the records under ``out`` into ``summary.json`` (see the README's rule)."""
    conditions = conditions or list(CONDITIONS)
    base = json.loads((out / "base.json").read_text())
    tasks = list(base["eval"]["per_task"])
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in conditions}
    for path in sorted((out / "runs").glob("*.json")):
        r = json.loads(path.read_text())
        if r["condition"] in runs:
            runs[r["condition"]].append(r)
    by_seed = {c: {r["seed"]: run_figures(r) for r in rs} for c, rs in runs.items()}
    table: dict[str, Any] = {}
    for c, rs in runs.items():
        if not rs:
            continue
        figures = [run_figures(r) for r in rs]
        table[c] = {
            "seeds": [r["seed"] for r in rs],
            "steps": sorted({len(r["steps"]) for r in rs}),
            "episodes_per_step": sorted({int(s["rollout/episodes"]) for r in rs for s in r["steps"]}),
            **{f: _mean_se([x[f] for x in figures]) for f in (*FIGURES, *REPORTED)},
            "per_task": {t: _mean_se([r["trained"]["per_task"][t]["mean_reward"] for r in rs]) for t in tasks},
        }
    effects = {
        name: {"with": w, "without": wo, **{f: paired(by_seed, w, wo, f) for f in FIGURES}}
        for name, (w, wo) in EFFECTS.items()
        if w in table and wo in table
    }
    two_by_two = ("async-lag", "async-nolag", "sync-lag", "sync-nolag")
    combined: dict[str, Any] = {}
    if all(c in table for c in two_by_two):
        seeds = sorted(set.intersection(*(set(by_seed[c]) for c in two_by_two)))

        def contrast(weights: dict[str, float], figure: str) -> dict[str, Any]:
            diffs = [sum(w * by_seed[c][s][figure] for c, w in weights.items()) for s in seeds]
            mean, se = _mean_se(diffs)
            return {"seeds": seeds, "diffs": diffs, "mean": mean, "se": se, "verdict": verdict(mean, se)}

        contrasts = {
            # (async-lag − async-nolag) − (sync-lag − sync-nolag): does lagging act differently under async?
            "async x lagging interaction": {"async-lag": 1, "async-nolag": -1, "sync-lag": -1, "sync-nolag": 1},
            "lagging, main effect": {"async-lag": 0.5, "async-nolag": -0.5, "sync-lag": 0.5, "sync-nolag": -0.5},
            "async, main effect": {"async-lag": 0.5, "async-nolag": 0.5, "sync-lag": -0.5, "sync-nolag": -0.5},
        }
        combined = {name: {f: contrast(w, f) for f in FIGURES} for name, w in contrasts.items()}
    summary = {
        "base": {
            "mean_reward": base["eval"]["mean_reward"],
            "stderr": base["eval"]["stderr"],
            "per_task": {t: base["eval"]["per_task"][t]["mean_reward"] for t in tasks},
            "pass_at_k": (base.get("sampled") or {}).get("pass", {}).get("pass_at_k"),
        },
        "conditions": table,
        "effects": effects,
        "two_by_two": combined,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=True))
    return summary


def _fmt(ms: list[float] | tuple[float, float], digits: int = 3) -> str:
    """``mean ± SE`` (the mean alone when the SE is NaN; "–" when the mean is)."""
    m, e = ms
    if isinstance(m, float) and math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if math.isnan(e) else f"{m:.{digits}f} ± {e:.{digits}f}"


def render_markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown: the conditions (mean ± SE over seeds) and the paired effects."""
    return render_conditions(summary) + "\n\n" + render_effects(summary)


def render_conditions(summary: dict[str, Any]) -> str:
    """The base model and every condition's figures (mean ± SE over seeds), as Markdown."""
    base = summary["base"]
    tasks = list(base["per_task"])
    pass_k = base.get("pass_at_k")
    lines = [
        f"Base model: held-out mean reward {base['mean_reward']:.3f} ± {base['stderr']:.3f} (SE over episodes)"
        + (f", pass@k {pass_k:.3f}" if pass_k is not None else "")
        + "; "
        + ", ".join(f"{t} {base['per_task'][t]:.3f}" for t in tasks)
        + ". Below: mean ± SE over seeds.",
        "",
        "| condition | seeds | steps | episodes/step | held-out mean reward | pass@k | mixed-reward groups | "
        + " | ".join(tasks)
        + " | staleness mean / max | max abs log ratio (unconstrained) | s/step | peak RSS GB |",
        "|---|---|---|---|---|---|---|" + "---|" * len(tasks) + "---|---|---|---|",
    ]
    for c, row in summary["conditions"].items():
        lines.append(
            f"| {c} | {len(row['seeds'])} | {'/'.join(map(str, row['steps']))} | "
            f"{'/'.join(map(str, row['episodes_per_step']))} | {_fmt(row['heldout_mean_reward'])} | {_fmt(row['pass_at_k'])} | "
            f"{_fmt(row['mixed_reward_groups'])} | "
            + " | ".join(_fmt(row["per_task"][t]) for t in tasks)
            + f" | {_fmt(row['staleness_mean'], 2)} / {_fmt(row['staleness_max'], 1)} | "
            f"{_fmt(row['log_ratio_abs_max'], 2)} ({_fmt(row['free_log_ratio_abs_max'], 2)}) | "
            f"{_fmt(row['train_seconds_per_step'], 0)} | {_fmt(row['peak_rss_gb'], 2)} |"
        )
    return "\n".join(lines)


def _effect_rows(summary: dict[str, Any], contrasts: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Row name -> the figures' paired results: the named effects, then the 2 x 2 contrasts (all,
    or those named in ``contrasts``)."""
    rows = {f"{k} ({v['with']} − {v['without']})": v for k, v in summary["effects"].items()}
    rows.update((k, v) for k, v in summary.get("two_by_two", {}).items() if contrasts is None or k in contrasts)
    return rows


def render_effects(summary: dict[str, Any]) -> str:
    """The paired effects and the 2 x 2 contrasts with their verdicts, as Markdown."""
    rows = _effect_rows(summary)
    if not rows:
        return "No paired difference yet: no seed has run both conditions of an effect."
    lines = ["Paired differences (with − without, per seed; mean ± SE; the 2 × SE rule):", ""]
    lines.append("| effect | held-out mean reward | pass@k | mixed-reward groups |")
    lines.append("|---|---|---|---|")
    for name, v in rows.items():
        cells = [
            f"{v[f]['mean']:+.3f}" + ("" if math.isnan(v[f]["se"]) else f" ± {v[f]['se']:.3f}") + f": **{v[f]['verdict']}**"
            for f in FIGURES
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_verdicts(summary: dict[str, Any]) -> str:
    """The named effects and the async x lagging interaction as verdicts alone (no figures: the
    project README links every figure to its file, and the figures are in the other blocks)."""
    rows = _effect_rows(summary, contrasts=("async x lagging interaction",))
    if not rows:
        return "None yet: no seed has run both conditions of an effect."
    lines = [
        "| effect (with − without, paired by seed) | held-out mean reward | pass@k | mixed-reward groups |",
        "|---|---|---|---|",
    ]
    for name, v in rows.items():
        lines.append(f"| {name} | " + " | ".join(v[f]["verdict"] for f in FIGURES) + " |")
    return "\n".join(lines)


#: block name -> what fills it: ``<!-- NAME -->`` ... ``<!-- /NAME -->`` in a Markdown file (the
#: results README and docs/trainer.md: the whole summary; the project README: the verdicts)
BLOCKS = {"summary": render_markdown, "verdicts": render_verdicts}


def write_summary_blocks(doc: Path, summary: dict[str, Any]) -> None:
    """Fill every block of :data:`BLOCKS` that ``doc`` has from ``summary``; nothing else in the
    file changes. A file with no block is refused."""
    text = doc.read_text()
    found = False
    for name, render in BLOCKS.items():
        block = re.compile(rf"<!-- {name} -->\n.*?<!-- /{name} -->", re.S)
        filled = f"<!-- {name} -->\n{render(summary)}\n<!-- /{name} -->"
        text, n = block.subn(lambda _, filled=filled: filled, text)
        found = found or n > 0
    if not found:
        raise SystemExit(f"{doc} has no block to fill (" + ", ".join(f"<!-- {b} -->" for b in BLOCKS) + ")")
    doc.write_text(text)


# -------------------------------------------------------------------------------------- runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.summarize:  # the records alone: no trainer imported
        summary = summarize(out)
        for doc in [out / "README.md", *map(Path, a.docs)]:
            write_summary_blocks(doc, summary)
        print(render_markdown(summary))
        return summary
    from agentrl_trainer.demo import exits_when_interrupted, sigterm_unwinds

    if a.run_base or a.run_one:  # a child process: SIGTERM stops everything it started, then it exits
        with exits_when_interrupted(), sigterm_unwinds():
            if a.run_base:
                run_base(a, out)
            else:
                run_one(a, a.run_one[0], int(a.run_one[1]), out)
        return {}
    with sigterm_unwinds():  # here: the child is stopped (run_child), then this process unwinds
        return sweep(a, argv, out)


def sweep(a: argparse.Namespace, argv: list[str] | None, out: Path) -> dict[str, Any]:
    """The base evaluation, every (seed, condition) without a record, then the summary."""
    script = Path(__file__)
    if not (out / "base.json").exists():
        print("base model: evaluating", flush=True)
        code = child_process(argv, ["--run-base"], script)
        if code != 0 or not (out / "base.json").exists():
            raise SystemExit(f"the base evaluation failed (exit {code}); rerun to resume")
    for tag, condition, seed in runs_to_do(a, out):
        started = time.monotonic()
        f = run_figures(run_child(argv, condition, seed, out, script))
        print(
            f"{tag}: held-out {f['heldout_mean_reward']:.3f}, pass@k "
            f"{f['pass_at_k']:.3f}, peak RSS {f['peak_rss_gb']:.2f} GB, {time.monotonic() - started:.0f} s",
            flush=True,
        )
    summary = summarize(out, a.conditions)
    print()
    print(render_markdown(summary))
    return summary


if __name__ == "__main__":
    main()
