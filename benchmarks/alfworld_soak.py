"""ALFWorld soak: many episodes through a worker; its memory and open files over time.

    python benchmarks/alfworld_soak.py [--episodes 1000] [--concurrency 4] [--split dev]
        [--games K] [--processes N] [--abandon-every 10] [--sample-every 25] [--warmup 100] [--out FILE]

Starts a controller and an ``alfworld`` worker as separate processes (``LocalStack``, as
``agentrl-envs up`` runs them) and plays the split's reference policies through them over HTTP,
cycling over the games (the split's first ``--games``; unset: all of them). Every
``--abandon-every``-th episode is abandoned after three actions (the client cancels it: the
worker tears down a game in progress). Episodes run in rounds of ``--sample-every``,
``--concurrency`` at a time; after each round, with no episode in flight, the worker process and
every process under it (the engine processes of ``--processes``, unset: one per core: fresh
interpreters, ``python -m agentrl_env_alfworld._engine_process``, so no multiprocessing resource
tracker) are measured with psutil: resident memory (RSS, summed over the processes) and open file
descriptors. Each process gets a role: ``worker``, ``engine``, or ``other`` for anything else.

Flat means: from the first measurement after ``--warmup`` episodes (by then every game of the
split has been loaded and the engine's caches hold what they will hold) to the last, the summed
RSS grows by less than a few percent and the open descriptors and processes stay the same.

Results go to ``benchmarks/results/alfworld_soak.json`` (the series and a summary) and a summary
is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from agentrl_envs import get_task
from agentrl_envs.agent import run_episode
from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.policy import as_policy
from agentrl_envs.stack import LocalStack

RESULTS = Path(__file__).parent / "results"


class Abandon:
    """A reference policy that walks away after ``actions`` actions (the episode is cancelled)."""

    def __init__(self, policy: Any, actions: int = 3) -> None:
        self.policy, self.left = policy, actions

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self.left == 0:
            return None
        self.left -= 1
        return await self.policy.act(messages, tools)


def measure(pid: int) -> dict[str, Any]:
    """RSS (MB) and open descriptors of process ``pid`` and each process under it."""
    root = psutil.Process(pid)
    procs = []
    for p in [root, *root.children(recursive=True)]:
        try:
            with p.oneshot():
                cmd = " ".join(p.cmdline())
                role = "worker" if p is root else ("engine" if "agentrl_env_alfworld._engine_process" in cmd else "other")
                procs.append({"pid": p.pid, "role": role, "rss_mb": p.memory_info().rss / 2**20, "fds": p.num_fds()})
        except psutil.NoSuchProcess:
            continue
    return {
        "rss_mb": round(sum(p["rss_mb"] for p in procs), 1),
        "fds": sum(p["fds"] for p in procs),
        "processes": [{**p, "rss_mb": round(p["rss_mb"], 1)} for p in procs],
    }


async def play(url: str, task_cls: Any, samples: list[dict[str, Any]], args: argparse.Namespace, pid: int) -> dict[str, Any]:
    series: list[dict[str, Any]] = []
    outcomes = {"solved": 0, "unsolved": 0, "abandoned": 0}
    failures: list[str] = []
    t0 = time.perf_counter()
    async with AsyncControllerClient(url) as client:
        indices = await client.get_indices(task_cls.name)
        gate = asyncio.Semaphore(args.concurrency)

        async def episode(n: int) -> None:
            i = n % len(samples)
            policy = as_policy(task_cls.reference_policy(samples[i]))
            abandon = args.abandon_every > 0 and n % args.abandon_every == args.abandon_every - 1
            async with gate:
                t = await run_episode(
                    client, task_cls.name, indices[i], Abandon(policy) if abandon else policy, start_timeout=120
                )
            if abandon:
                outcomes["abandoned"] += 1
            elif t.solved:
                outcomes["solved"] += 1
            else:
                outcomes["unsolved"] += 1
                failures.append(f"episode {n} (sample {i}): {t.status.value} {t.error or ''}"[:300])

        series.append({"episodes": 0, "elapsed_s": 0.0, **measure(pid)})
        for first in range(0, args.episodes, args.sample_every):
            last = min(args.episodes, first + args.sample_every)
            await asyncio.gather(*(episode(n) for n in range(first, last)))
            series.append({"episodes": last, "elapsed_s": round(time.perf_counter() - t0, 2), **measure(pid)})
            print(
                f"  {last:5d} episodes  {series[-1]['elapsed_s']:7.1f} s  rss {series[-1]['rss_mb']:7.1f} MB"
                f"  fds {series[-1]['fds']:4d}  processes {len(series[-1]['processes'])}",
                file=sys.stderr,
            )
    return {"series": series, "outcomes": outcomes, "failures": failures[:20], "wall_s": round(time.perf_counter() - t0, 1)}


def flatness(series: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Start (first measurement at or after ``warmup`` episodes) against end and the worst since."""
    after = [s for s in series if s["episodes"] >= warmup] or series[-1:]
    start, end = after[0], after[-1]
    return {
        "from_episode": start["episodes"],
        "to_episode": end["episodes"],
        "rss_mb": {"start": start["rss_mb"], "end": end["rss_mb"], "max": max(s["rss_mb"] for s in after)},
        "rss_ratio": round(end["rss_mb"] / start["rss_mb"], 4),
        "rss_max_ratio": round(max(s["rss_mb"] for s in after) / start["rss_mb"], 4),
        "fds": {"start": start["fds"], "end": end["fds"], "max": max(s["fds"] for s in after)},
        "fds_delta": end["fds"] - start["fds"],
        "processes": {"start": len(start["processes"]), "end": len(end["processes"])},
        "same_pids": [p["pid"] for p in start["processes"]] == [p["pid"] for p in end["processes"]],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    task_cls = get_task("alfworld")
    samples = task_cls.load_samples(split=args.split)[: args.games]
    options = {} if args.processes is None else {"processes": args.processes}
    with LocalStack(["alfworld"], split=args.split, task_options={"alfworld": options}) as stack:
        worker = next(p for p in stack.processes if p.name == "worker-alfworld")
        played = asyncio.run(play(stack.url, task_cls, samples, args, worker.proc.pid))
    series = played.pop("series")
    return {
        "task": "alfworld",
        "split": args.split,
        "games": len(samples),
        "episodes": args.episodes,
        "concurrency": args.concurrency,
        "processes": args.processes,
        "abandon_every": args.abandon_every,
        "warmup": args.warmup,
        **played,
        "episodes_per_s": round(args.episodes / played["wall_s"], 2),
        "flat": flatness(series, args.warmup),
        "series": series,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--games", type=int, default=None, help="cycle over the split's first K games (unset: all)")
    ap.add_argument("--processes", type=int, default=None, help="engine processes (the task's option; unset: one per core)")
    ap.add_argument("--abandon-every", type=int, default=10, help="every Nth episode is cancelled after 3 actions (0: never)")
    ap.add_argument("--sample-every", type=int, default=25, help="episodes per round; measured after each")
    ap.add_argument("--warmup", type=int, default=100, help="episodes before the flatness baseline")
    ap.add_argument("--out", type=Path, default=RESULTS / "alfworld_soak.json")
    args = ap.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    flat, o = result["flat"], result["outcomes"]
    print(
        f"alfworld soak: {result['episodes']} episodes over {result['games']} {args.split} games in {result['wall_s']} s "
        f"({result['episodes_per_s']} episodes/s, concurrency {args.concurrency}): {o['solved']} solved, "
        f"{o['unsolved']} unsolved, {o['abandoned']} abandoned\n"
        f"  worker + engine processes, episode {flat['from_episode']} -> {flat['to_episode']}: "
        f"RSS {flat['rss_mb']['start']} -> {flat['rss_mb']['end']} MB (x{flat['rss_ratio']}, max x{flat['rss_max_ratio']}), "
        f"open files {flat['fds']['start']} -> {flat['fds']['end']} (max {flat['fds']['max']}), "
        f"processes {flat['processes']['start']} -> {flat['processes']['end']} (same pids: {flat['same_pids']})\n"
        f"  -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
