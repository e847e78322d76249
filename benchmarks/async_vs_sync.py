"""Async vs sync rollout on equal work: trajectories per second and engine idle fraction.

Both modes run the real :class:`agentrl_trainer.pipeline.RolloutPipeline` against a real
controller and ``echo`` worker (separate local processes), with identical settings (group size,
groups per step, queue capacity, engines, seeds), until the same number of trajectories has been
trained on. Two parts:

* ``--part sim`` — **a simulation**. The engines are ``SimulatedEngine``\\ s: no model, each turn
  sleeps for a log-normal latency (default median 50 ms, sigma 1.5: p99 ≈ 33× the median) and
  answers with the echo tool call, with the wrong word with probability ``--p-wrong`` so an
  episode takes a geometric number of turns (a second long tail). The "trainer" is simulated
  too: a fixed ``--train-s`` sleep per step stands in for the optimizer step, then
  ``pipeline.publish(step, {})`` (a simulated engine only takes the version number). Sync: per
  step ``collect(groups)`` then train; async: per step ``get_batch(min_groups)`` (every complete
  group queued, at most the capacity) then train. This measures the scheduling alone; target: async ≥ 2× sync.
* ``--part real`` — the real thing on the CPU: ``AgentRLTrainer`` (SmolLM2-135M, LoRA, the
  transformers ``LocalEngine``) on ``echo``, sync then async, same settings and step count.
  Rollout and training share the machine's cores here, so async can only overlap what the cores
  leave free; the figure is reported as measured.

Trajectories/s = trajectories trained on ÷ wall time from the pipeline's start to the end of the
last training step. Engine idle fraction = 1 − (time with ≥ 1 generation in flight ÷ wall),
averaged over engines (``pipeline.stats()``). Results go to
``benchmarks/results/async_vs_sync.json`` (a part not run keeps its previous entry).

    python benchmarks/async_vs_sync.py [--part sim|real|all] [--quick] [--steps 20] [--real-steps 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("sync", "async")
TOOL_CALL = '<tool_call>\n{{"name": "echo", "arguments": {{"text": "{}"}}}}\n</tool_call>'
WORD_RE = re.compile(r"Echo the word '([^']+)'")


# ---------------------------------------------------------------------------------- simulation


def make_responder(seed: int, p_wrong: float):
    """The simulated policy: echo the asked word, or with probability ``p_wrong`` a wrong one."""
    rng = random.Random(seed)

    def respond(prompt_text: str) -> str:
        m = WORD_RE.search(prompt_text)
        word = m.group(1) if m else "?"
        if rng.random() < p_wrong:
            word = word[::-1] + "x"  # never the asked word
        return TOOL_CALL.format(word)

    return respond


def run_sim_mode(mode: str, a: argparse.Namespace, url: str, tokenizer: Any, indices: list[Any]) -> dict[str, Any]:
    from agentrl_trainer.engines import SimulatedEngine
    from agentrl_trainer.pipeline import RolloutPipeline, TaskSampler
    from agentrl_trainer.rollout import RolloutSettings

    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engines = [
        SimulatedEngine(
            tokenizer,
            make_responder(a.seed * 1000 + i, a.p_wrong),
            median_s=a.median_s,
            sigma=a.sigma,
            seed=a.seed * 1000 + i,
            stop_token_id=stop_id,
        )
        for i in range(a.engines)
    ]
    pipeline = RolloutPipeline(
        url,
        engines,
        tokenizer,
        [stop_id],
        TaskSampler({"echo": indices}, seed=a.seed),
        RolloutSettings(max_tokens=64, max_turns=a.max_turns),
        group_size=a.group_size,
        mode=mode,  # type: ignore[arg-type]
        capacity_groups=a.capacity,
        lagging_fraction=a.lagging_fraction,
        lag_steps=a.lag_steps,
        lagging_prob=a.lagging_prob,
        seed=a.seed,
    )
    target = a.steps * a.groups * a.group_size
    trained, step = 0, 0
    waits: list[float] = []
    stale: list[int] = []
    turns: list[int] = []
    rewards: list[float] = []
    pipeline.start()
    try:
        pipeline.publish(0, {})
        while trained < target:
            step += 1
            t = time.monotonic()
            if mode == "sync":
                groups = pipeline.collect(a.groups)
            else:
                groups = pipeline.get_batch(a.min_groups, timeout=600)
            waits.append(time.monotonic() - t)
            for g in groups:
                for e in g.episodes:
                    trained += 1
                    turns.append(e.turns)
                    rewards.append(e.reward)
                    if e.trajectory:
                        stale.extend(step - 1 - tt.version for tt in e.trajectory.turns)
            time.sleep(a.train_s)  # the simulated optimizer step
            pipeline.publish(step, {})
        stats = pipeline.stats()
    finally:
        pipeline.stop()
        for e in engines:
            e.close()
    wall = stats["wall_seconds"]
    return {
        "steps": step,
        "trajectories": trained,
        "wall_s": wall,
        "trajectories_per_s": trained / wall,
        "engine_idle_fraction": stats["engine_idle_fraction"],
        "trainer_wait_s_mean": statistics.fmean(waits),
        "trainer_wait_fraction": sum(waits) / wall,
        "staleness_mean": statistics.fmean(stale) if stale else 0.0,
        "staleness_max": max(stale) if stale else 0,
        "turns_per_episode": statistics.fmean(turns) if turns else 0.0,
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "episodes_run": int(stats["episodes"]),
        "infra_failures": int(stats["infra_failures"]),
    }


def run_sim(a: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from agentrl_envs.chat.loading import model_directory
    from agentrl_envs.client import ControllerClient
    from agentrl_envs.stack import LocalStack

    tokenizer = AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)
    config = {
        k: getattr(a, k)
        for k in (
            "engines", "group_size", "groups", "min_groups", "capacity", "steps", "train_s", "median_s", "sigma",
            "p_wrong", "max_turns", "lagging_fraction", "lag_steps", "lagging_prob", "seed",
        )
    }  # fmt: skip
    config["equal_work_trajectories"] = a.steps * a.groups * a.group_size
    out: dict[str, Any] = {"config": config, "simulation": True}
    with LocalStack(["echo"]) as stack:
        with ControllerClient(stack.url) as client:
            indices = client.get_indices("echo")
        for mode in MODES:
            r = run_sim_mode(mode, a, stack.url, tokenizer, indices)
            out[mode] = r
            _report("sim", mode, r)
    out["speedup"] = out["async"]["trajectories_per_s"] / out["sync"]["trajectories_per_s"]
    return out


def _report(part: str, mode: str, r: dict[str, Any]) -> None:
    """One result line: ``sim  async   640 trajectories in ...``."""
    print(
        f"{part:<4} {mode:<5} {r['trajectories']:>5} trajectories in {r['wall_s']:6.1f} s: {r['trajectories_per_s']:7.2f} traj/s,"
        f" engine idle {r['engine_idle_fraction']:.2f}, staleness {r['staleness_mean']:.2f}",
        flush=True,
    )


# ---------------------------------------------------------------------------------- real engine


def run_real_mode(mode: str, a: argparse.Namespace) -> dict[str, Any]:
    from transformers import TrainerCallback

    from agentrl_trainer import AgentRLConfig, AgentRLTrainer

    marks: dict[str, Any] = {}

    class Clock(TrainerCallback):
        trainer: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            marks["begin"] = time.monotonic()
            marks["pipeline_start"] = self.trainer.pipeline.started_at

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            marks["end"] = time.monotonic()
            marks["stats"] = self.trainer.pipeline.stats()

    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as out_dir:
        cfg = AgentRLConfig(
            output_dir=out_dir,
            tasks=["echo"],
            rollout_mode=mode,
            assistant_prefix='<tool_call>\n{"name": "',
            max_turns=a.real_max_turns,
            max_completion_length=a.real_max_tokens,
            engine_device=a.real_engine_device,
            num_generations=a.real_group_size,
            max_groups_per_step=a.real_groups,
            min_groups_per_step=a.real_min_groups,
            num_engines=a.real_engines,
            lagging_fraction=a.lagging_fraction,
            lag_steps=a.lag_steps,
            lagging_prob=a.lagging_prob,
            max_steps=a.real_steps,
            report_to=[],
            save_strategy="no",
            logging_steps=a.real_steps,
            disable_tqdm=True,
            learning_rate=1e-4,
            beta=0.0,
            use_lora=True,
            seed=a.seed,
        )
        t0 = time.monotonic()
        trainer = AgentRLTrainer(cfg, callbacks=[clock])
        clock.trainer = trainer
        init_s = time.monotonic() - t0
        trainer.train()
    log = trainer.step_log
    wall = marks["end"] - marks["pipeline_start"]
    trajectories = int(sum(r["rollout/episodes"] for r in log))
    stale = [r["rollout/staleness_mean"] for r in log if "rollout/staleness_mean" in r]
    return {
        "steps": len(log),
        "trajectories": trajectories,
        "wall_s": wall,
        "trajectories_per_s": trajectories / wall,
        "engine_idle_fraction": marks["stats"]["engine_idle_fraction"],
        "trainer_wait_s_mean": statistics.fmean(r["rollout/wait_s"] for r in log),
        "trainer_wait_fraction": sum(r["rollout/wait_s"] for r in log) / wall,
        "train_s_mean": statistics.fmean(r.get("time/train_s", 0.0) for r in log),
        "staleness_mean": statistics.fmean(stale) if stale else 0.0,
        "turns_per_episode": statistics.fmean(r["rollout/turns_per_episode"] for r in log),
        "reward_mean": statistics.fmean(r["reward/mean"] for r in log),
        "setup_before_pipeline_s": init_s,
        "pipeline_start_to_first_step_s": marks["begin"] - marks["pipeline_start"],
    }


def run_real(a: argparse.Namespace) -> dict[str, Any]:
    config = {
        "model": "SmolLM2-135M-Instruct (embedded), LoRA",
        "device": None,
        "engines": a.real_engines,
        "group_size": a.real_group_size,
        "groups": a.real_groups,
        "min_groups": a.real_min_groups,
        "steps": a.real_steps,
        "max_turns": a.real_max_turns,
        "max_completion_length": a.real_max_tokens,
        "engine_device": a.real_engine_device or "the trained model's",
        "lagging_fraction": a.lagging_fraction,
        "seed": a.seed,
        "torch_threads": None,
    }
    import torch

    config["torch_threads"] = torch.get_num_threads()
    # the trainer puts the model (and the engines' copies) where accelerate finds a device
    config["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    out: dict[str, Any] = {"config": config, "simulation": False}
    for mode in MODES:
        r = run_real_mode(mode, a)
        out[mode] = r
        _report("real", mode, r)
    out["speedup"] = out["async"]["trajectories_per_s"] / out["sync"]["trajectories_per_s"]
    return out


# ---------------------------------------------------------------------------------- main


def summary(results: dict[str, Any]) -> str:
    lines = [
        f"{'part':<5} {'mode':<6} {'steps':>5} {'traj':>5} {'wall s':>7} {'traj/s':>7} {'idle':>5} {'wait':>5} {'stale':>5}",
    ]
    for part in ("sim", "real"):
        if part not in results:
            continue
        for mode in MODES:
            r = results[part][mode]
            lines.append(
                f"{part:<5} {mode:<6} {r['steps']:>5} {r['trajectories']:>5} {r['wall_s']:>7.1f} {r['trajectories_per_s']:>7.2f}"
                f" {r['engine_idle_fraction']:>5.2f} {r['trainer_wait_fraction']:>5.2f} {r['staleness_mean']:>5.2f}"
            )
    lines.append("(idle = engine idle fraction; wait = share of wall time the trainer waited for rollouts)")
    for part in ("sim", "real"):
        if part in results:
            note = (
                " (simulation; target >= 2x: " + ("met)" if results[part]["speedup"] >= 2 else "NOT met)")
                if part == "sim"
                else ""
            )
            lines.append(f"speedup {part}: async / sync = {results[part]['speedup']:.2f}x{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("sim", "real", "all"), default="all")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test, not a measurement)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lagging-fraction", type=float, default=0.0, help="share of lagging engines (both parts)")
    ap.add_argument("--lag-steps", type=int, default=1)
    ap.add_argument("--lagging-prob", type=float, default=0.0)
    sim = ap.add_argument_group("simulation (--part sim)")
    sim.add_argument("--engines", type=int, default=4, help="simulated engines")
    sim.add_argument("--group-size", type=int, default=8, help="episodes per GRPO group")
    sim.add_argument("--groups", type=int, default=4, help="groups per step (sync: exactly; async: at most)")
    sim.add_argument("--min-groups", type=int, default=1, help="async: least groups per step")
    sim.add_argument("--capacity", type=int, default=0, help="queued + in-flight groups at most (0 = 2 x groups)")
    sim.add_argument("--steps", type=int, default=20, help="equal work = steps x groups x group size trajectories")
    sim.add_argument("--train-s", type=float, default=0.5, help="simulated optimizer step (sleep) per step")
    sim.add_argument("--median-s", type=float, default=0.05, help="median per-turn latency")
    sim.add_argument("--sigma", type=float, default=1.5, help="log-normal shape of the per-turn latency")
    sim.add_argument("--p-wrong", type=float, default=0.3, help="chance a turn echoes the wrong word (another turn follows)")
    sim.add_argument("--max-turns", type=int, default=8, help="turn cap per episode")
    real = ap.add_argument_group("real engine (--part real)")
    real.add_argument("--real-engines", type=int, default=2)
    real.add_argument("--real-group-size", type=int, default=4)
    real.add_argument("--real-groups", type=int, default=2, help="max_groups_per_step")
    real.add_argument("--real-min-groups", type=int, default=1, help="min_groups_per_step")
    real.add_argument("--real-steps", type=int, default=3)
    real.add_argument("--real-max-turns", type=int, default=2)
    real.add_argument("--real-max-tokens", type=int, default=24, help="max_completion_length (tokens per turn)")
    real.add_argument("--real-engine-device", default="", help="engine_device: e.g. cpu to sample on the CPU while a GPU trains")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "async_vs_sync.json"))
    a = ap.parse_args(argv)
    if a.quick:
        a.engines, a.group_size, a.groups, a.steps, a.train_s, a.median_s = 2, 4, 2, 3, 0.05, 0.01
        a.real_steps, a.real_max_tokens, a.real_group_size, a.real_engines = 1, 8, 2, 1
    a.capacity = a.capacity or 2 * a.groups
    logging.basicConfig(level=logging.WARNING)

    out = Path(a.output)
    results: dict[str, Any] = {}
    if out.exists():  # keep the part not run this time
        try:
            results = {k: v for k, v in json.loads(out.read_text()).items() if k in ("sim", "real")}
        except (OSError, ValueError):
            results = {}
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "quick": a.quick}
    if a.part in ("sim", "all"):
        results["sim"] = {**stamp, **run_sim(a)}
    if a.part in ("real", "all"):
        results["real"] = {**stamp, **run_real(a)}
    print()
    print(summary(results))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
