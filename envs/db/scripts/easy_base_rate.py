"""Base success of the built-in SmolLM2-135M-Instruct on an easy split, under the trainer's
rollout protocol (one sample per episode, temperature 1, top_p 1, 48 tokens per turn).

    .venv/bin/python envs/db/scripts/easy_base_rate.py --task db --split easy-test --n 64 [--no-force]

Per turn: ``prompt_ids = engine.encode_prompt(messages, tools)``, then (unless ``--no-force``)
the token ids of ``<tool_call>\\n{"name": "`` are appended and kept as the start of the answer,
``engine.generate_tokens(..., max_tokens=48, temperature=1.0, top_p=1.0)``,
``engine.decode_completion(forced + completion, tool_names)``; the assistant message goes to the
real task (``TaskRuntime`` / ``Episode`` in-process, the same code a worker runs) until the
episode ends. Serves the db and the os task (the os task needs its bubblewrap sandbox).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.models.engine import TransformersEngine
from agentrl_envs.schema import Message, ToolDefinition

FORCED = '<tool_call>\n{"name": "'


async def run(args: argparse.Namespace) -> None:
    engine = TransformersEngine()
    forced_ids = [] if args.no_force else list(engine.tokenizer(FORCED, add_special_tokens=False)["input_ids"])
    runtime = TaskRuntime(get_task(args.task), split=args.split)
    await runtime.open()
    rewards, turns, kinds, prompt_tokens = [], [], collections.defaultdict(list), []
    started = time.perf_counter()
    try:
        for index in list(range(len(runtime.samples)))[: args.n]:
            episode = runtime.episode(index)
            first = await episode.start()
            tools = [ToolDefinition.model_validate(t) for t in first.tools or []]
            names = [t.function.name for t in tools]
            messages = [Message.model_validate(m) for m in first.messages]
            out = first
            while not episode.finished:
                prompt_ids = engine.encode_prompt(messages, tools)
                if not prompt_tokens or len(messages) == 2:
                    prompt_tokens.append(len(prompt_ids))
                completion, _ = engine.generate_tokens(prompt_ids + forced_ids, max_tokens=48, temperature=1.0, top_p=1.0)
                reply = engine.decode_completion(forced_ids + completion, names)
                out = await episode.step([reply])
                messages += [reply, *(Message.model_validate(m) for m in out.messages)]
                if args.verbose:
                    print(f"  [{index}] {reply.model_dump(exclude_none=True)} -> {[m['content'][:80] for m in out.messages]}")
            sample = runtime.samples[index]
            kind = sample.get("type", [None])[0] or sample.get("kind", "?")
            rewards.append(out.reward)
            turns.append(episode.turns)
            kinds[kind].append(out.reward)
            print(
                f"episode {index:3d} {kind:<8} reward {out.reward:.0f} turns {episode.turns} status {out.status.value}",
                flush=True,
            )
    finally:
        await runtime.close()
    n = len(rewards)
    summary = {
        "task": args.task,
        "split": args.split,
        "forced_prefix": not args.no_force,
        "episodes": n,
        "success": sum(rewards) / n,
        "mean_turns": sum(turns) / n,
        "by_kind": {k: f"{sum(v):.0f}/{len(v)}" for k, v in sorted(kinds.items())},
        "first_prompt_tokens": [min(prompt_tokens), max(prompt_tokens)],
        "seconds": round(time.perf_counter() - started),
    }
    print(json.dumps(summary))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=["db", "os"])
    p.add_argument("--split", default="easy-test")
    p.add_argument("--n", type=int, default=64, help="episodes: the first N samples of the split")
    p.add_argument("--no-force", action="store_true", help="do not force the tool-call prefix")
    p.add_argument("--verbose", action="store_true")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
