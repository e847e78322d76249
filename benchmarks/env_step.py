"""Environment step latency of any task: start (reset) and every tool call, episodes/s, memory.

    python benchmarks/env_step.py --task kg [--split dev | --data FILE] [--option k=v ...]
        [--episodes 200] [--concurrency 8] [--warmup 0] [--label NAME] [--out FILE]

Plays the task's reference policies in this process (the task's own runtime, as a worker holds
it, without HTTP: the controller and worker have their own benchmark, ``session_scale.py``),
``--concurrency`` episodes at a time, cycling over the samples that have a reference. Every
``start`` and every ``interact`` is timed, the latter keyed by the tool called (``text`` for a
message without a call, e.g. KG's final answer). ``--warmup N`` plays N episodes first, untimed
(a task's first load of each sample, its caches), so the figures are of a warm worker. Memory is
this process's resident set (VmRSS) before the task's resources open, after, and at the end:
what a worker serving the task holds.

Results go to ``benchmarks/results/env_step_<task>[_<label>].json`` and a summary is printed.
Options are the task's (``agentrl-envs describe TASK``), e.g. ``--option backend=remote --option
endpoint=http://127.0.0.1:8890/sparql`` for KG's remote store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.policy import as_policy

RESULTS = Path(__file__).parent / "results"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def summary(samples_s: list[float]) -> dict[str, float]:
    if not samples_s:
        return {"n": 0}
    ms = sorted(1000 * s for s in samples_s)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(ms[-1], 3),
    }


class TimedSessions(InProcessSessions):
    """In-process sessions that time every start and every interact (by the tool it calls)."""

    def __init__(self, runtime: TaskRuntime) -> None:
        super().__init__(runtime)
        self.starts: list[float] = []
        self.steps: dict[str, list[float]] = defaultdict(list)

    async def start_sample_when_free(self, task, index, *, timeout=0.0, delay=None):
        t = time.perf_counter()
        result = await super().start_sample_when_free(task, index, timeout=timeout, delay=delay)
        self.starts.append(time.perf_counter() - t)
        return result

    async def interact(self, session_id, messages):
        calls = [c for m in messages for c in (m.get("tool_calls") or [])]
        key = calls[0]["function"]["name"] if calls else "text"
        t = time.perf_counter()
        result = await super().interact(session_id, messages)
        self.steps[key].append(time.perf_counter() - t)
        return result


def parse_options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--option expects KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    task_cls = get_task(args.task)
    options = parse_options(args.option)
    t0 = time.perf_counter()
    runtime = TaskRuntime(task_cls, split=None if args.data else args.split, data=args.data, config=options)
    rss_before = rss_mb()
    await runtime.open()
    open_s = time.perf_counter() - t0
    rss_open = rss_mb()
    indices = [i for i in runtime.indices if task_cls.reference_policy(runtime.samples[i]) is not None]
    if not indices:
        raise SystemExit(f"task {args.task!r}: no sample of this split has a reference policy")
    sessions = TimedSessions(runtime)
    queue: asyncio.Queue[int] = asyncio.Queue()
    rewards: list[float] = []
    done = 0
    last_print = time.monotonic()

    async def player() -> None:
        nonlocal done, last_print
        while not queue.empty():
            index = queue.get_nowait()
            policy = as_policy(task_cls.reference_policy(runtime.samples[index]))
            t = await run_episode(sessions, task_cls.name, index, policy)
            rewards.append(t.reward)
            done += 1
            if time.monotonic() - last_print > 5:
                last_print = time.monotonic()
                print(f"  {done}/{args.episodes} episodes", file=sys.stderr)

    for n in range(args.warmup):
        queue.put_nowait(indices[n % len(indices)])
    await asyncio.gather(*(player() for _ in range(args.concurrency)))
    rewards.clear()
    sessions.starts.clear()
    sessions.steps.clear()
    for n in range(args.episodes):
        queue.put_nowait(indices[(args.warmup + n) % len(indices)])
    t1 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(player() for _ in range(args.concurrency)))
    wall = time.perf_counter() - t1
    cpu = time.process_time() - cpu0
    await sessions.aclose()
    rss_end = rss_mb()
    await runtime.close()
    all_steps = [s for v in sessions.steps.values() for s in v]
    return {
        "task": args.task,
        "label": args.label,
        "split": None if args.data else args.split,
        "data": args.data,
        "options": options,
        "episodes": len(rewards),
        "concurrency": args.concurrency,
        "warmup_episodes": args.warmup,
        "solved": sum(r == 1.0 for r in rewards),
        "episodes_per_s": round(len(rewards) / wall, 2),
        "steps_per_s": round(len(all_steps) / wall, 1),
        "cpu_ms_per_step": round(1000 * cpu / max(1, len(all_steps)), 3),
        "open_s": round(open_s, 2),
        "start": summary(sessions.starts),
        "step": summary(all_steps),
        "step_by_tool": {k: summary(v) for k, v in sorted(sessions.steps.items())},
        "rss_mb": {"before_open": rss_before, "after_open": rss_open, "end": rss_end},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--data", default=None, help="a data file instead of a shipped split")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a task option (repeatable)")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=0, help="episodes played untimed first")
    ap.add_argument("--label", default=None, help="suffix of the result file, e.g. 'remote-1m'")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    result = asyncio.run(bench(args))
    out = args.out or RESULTS / f"env_step_{args.task}{'_' + args.label if args.label else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    s, st = result["step"], result["start"]
    print(
        f"{args.task}{' ' + args.label if args.label else ''}: {result['episodes']} episodes "
        f"({result['solved']} solved) at {result['episodes_per_s']} episodes/s, concurrency {args.concurrency}\n"
        f"  start p50 {st.get('p50_ms')} ms p99 {st.get('p99_ms')} ms; step p50 {s.get('p50_ms')} ms "
        f"p99 {s.get('p99_ms')} ms ({result['cpu_ms_per_step']} ms CPU/step)\n"
        f"  memory: {result['rss_mb']['before_open']} MB before open, {result['rss_mb']['after_open']} MB after "
        f"(open {result['open_s']} s), {result['rss_mb']['end']} MB at the end\n  -> {out}"
    )
    for tool, v in result["step_by_tool"].items():
        print(f"    {tool:16s} n={v['n']:6d} p50 {v['p50_ms']:8.3f} ms  p99 {v['p99_ms']:8.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
