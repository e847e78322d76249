"""Throughput of the built-in model server at 1, 4 and 16 concurrent requests.

    python benchmarks/model_server.py [--levels 1 4 16] [--requests-per-level 32] [--max-tokens 48]
        [--episodes 16] [--split easy-test] [--out FILE]

Starts the built-in server (``LocalModelServer``: SmolLM2-135M-Instruct on the CPU, a process of
its own, batching concurrent requests) and, at each concurrency level:

* **tokens/s**: ``--requests-per-level`` chat requests through the official ``openai`` client,
  that many in flight at once, each a DB-style question with the DB task's tools and
  ``tool_choice="required"``, ``--max-tokens`` tokens, temperature 0.7 (seeded per request):
  completion tokens (the server's ``usage``) over wall time, and the request latency p50;
* **episodes/min**: ``agentrl-envs eval``'s runner plays the first ``--episodes`` samples of
  the DB task's ``--split`` (an embedded controller and worker) against the server, ``level``
  episodes in flight, ``tool_choice="required"``, 64 tokens per turn.

A warm-up request loads the grammar first. The speed-up at each level is its tokens/s over the
1-request level's. Results go to ``benchmarks/results/model_server.json``; a summary is printed.
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
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_sql",
            "description": "Run one SQL statement on the database and see its result.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "commit_final_answer",
            "description": "Commit the final answer.",
            "parameters": {
                "type": "object",
                "properties": {"answers": {"type": "array", "items": {"type": "string"}}},
                "required": ["answers"],
            },
        },
    },
]
QUESTIONS = [
    "Table employees(id, name, salary). How many employees earn more than 5000?",
    "Table orders(id, customer, total). What is the largest order total?",
    "Table cities(name, country, population). Which city in France has the most people?",
    "Table books(title, author, year). How many books did Tolstoy write?",
]


async def token_throughput(base_url: str, level: int, requests: int, max_tokens: int) -> dict[str, Any]:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=600) as client:

        async def one(i: int) -> tuple[int, float]:
            t0 = time.monotonic()
            r = await client.chat.completions.create(
                model="default",
                messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                tools=TOOLS,
                tool_choice="required",
                max_tokens=max_tokens,
                temperature=0.7,
                seed=i,
            )
            return r.usage.completion_tokens, time.monotonic() - t0

        await one(0)  # warm-up: the grammar's compilation, first-call costs
        queue = list(range(requests))
        results: list[tuple[int, float]] = []

        async def lane() -> None:
            while queue:
                results.append(await one(queue.pop()))

        t0 = time.monotonic()
        await asyncio.gather(*(lane() for _ in range(level)))
        wall = time.monotonic() - t0
    tokens = sum(n for n, _ in results)
    return {
        "requests": len(results),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "latency_p50_s": round(statistics.median(t for _, t in results), 2),
    }


def episode_throughput(base_url: str, controller: str, level: int, episodes: int) -> dict[str, Any]:
    from agentrl_envs.eval import EvalConfig, evaluate, summarize

    config = EvalConfig(
        tasks=["db"],
        controller=controller,
        base_url=base_url,
        api_key="EMPTY",
        limit=episodes,
        concurrency=level,
        temperature=0.0,
        max_tokens=64,
        tool_choice="required",
        progress=False,
    )
    t0 = time.monotonic()
    result = asyncio.run(evaluate(config))
    wall = time.monotonic() - t0
    summary = summarize(result)["tasks"]["db"]
    return {
        "episodes": len(result.episodes),
        "wall_s": round(wall, 2),
        "episodes_per_min": round(60 * len(result.episodes) / wall, 2),
        "success_rate": summary["success_rate"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--requests-per-level", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--episodes", type=int, default=16, help="DB episodes per level (0: skip episodes/min)")
    p.add_argument("--split", default="easy-test")
    p.add_argument("--out", default=str(RESULTS / "model_server.json"))
    a = p.parse_args(argv)
    from agentrl_envs.models.launch import LocalModelServer
    from agentrl_envs.stack import LocalStack

    levels: dict[str, Any] = {}
    with LocalModelServer(startup_timeout=300) as server, LocalStack(["db"], split=a.split) as stack:
        for level in a.levels:
            row = {"tokens": asyncio.run(token_throughput(server.base_url, level, a.requests_per_level, a.max_tokens))}
            if a.episodes:
                row["episodes"] = episode_throughput(server.base_url, stack.url, level, a.episodes)
            levels[str(level)] = row
            print(
                f"  {level:>3} in flight: {row['tokens']['tokens_per_s']:7.1f} tokens/s"
                + (f", {row['episodes']['episodes_per_min']:6.1f} episodes/min" if a.episodes else ""),
                flush=True,
            )
    base = levels[str(a.levels[0])]
    for row in levels.values():
        row["tokens_speedup"] = round(row["tokens"]["tokens_per_s"] / base["tokens"]["tokens_per_s"], 2)
        if a.episodes:
            row["episodes_speedup"] = round(row["episodes"]["episodes_per_min"] / base["episodes"]["episodes_per_min"], 2)
    out = {
        "levels": levels,
        "max_tokens": a.max_tokens,
        "requests_per_level": a.requests_per_level,
        "split": a.split,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    parts = [f"{k}: {v['tokens']['tokens_per_s']} tok/s ({v['tokens_speedup']}x)" for k, v in levels.items()]
    print("model server: " + ", ".join(parts))
    print(f"-> {a.out}")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
