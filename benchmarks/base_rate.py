"""Base success rate of a model on task splits, played exactly as the trainer plays them.

    .venv/bin/python benchmarks/base_rate.py --tasks db os --split easy-test --n 64 [--no-constrain]

Starts the embedded stack (controller + one worker per task) on the split, loads the built-in
SmolLM2-135M-Instruct (or ``--model``) into the trainer's :class:`LocalEngine` and plays the first
``--n`` samples of each task once with :func:`agentrl_trainer.evaluate.evaluate` — the held-out
evaluation of ``make train-demo``; the tasks in ``RolloutSettings.text_answer_tasks`` (kg, as the
trainer's default) are sampled under the grammar's auto mode, so their text answers can end an
episode. Prints per-task success and writes ``benchmarks/results/base_rate.json``. The os task
needs its sandbox (``.ci/os-sandbox.sh``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.client import ControllerClient
from agentrl_envs.stack import LocalStack
from agentrl_trainer.engines.local import LocalEngine
from agentrl_trainer.evaluate import evaluate, summarize
from agentrl_trainer.rollout import RolloutSettings

RESULTS = Path(__file__).parent / "results"


def _tail(episode, engine: LocalEngine) -> str:
    """The episode from the model's first sampled token on (what it wrote and what it was told)."""
    if episode.trajectory is None or not episode.trajectory.segments:
        return ""
    segment = episode.trajectory.segments[-1]
    first = next((i for i, m in enumerate(segment.loss_mask) if m), len(segment.input_ids))
    return engine.engine.tokenizer.decode(segment.input_ids[first:])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["db", "os"])
    p.add_argument("--split", default="easy-test")
    p.add_argument("--n", type=int, default=32, help="samples per task (the split's first N), one episode each")
    p.add_argument("--model", default=None, help="HF directory or .gguf (default: the built-in SmolLM2-135M-Instruct)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-turn-tokens", type=int, default=48)
    p.add_argument("--no-constrain", action="store_true", help="sample turns without the tool-call grammar")
    p.add_argument("--close-calls", action="store_true", help="complete a call still open when a turn's tokens are nearly spent")
    p.add_argument("--out", default=str(RESULTS / "base_rate.json"))
    p.add_argument("--transcripts", type=int, default=4, help="episodes per task whose turns go into the JSON")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    settings = RolloutSettings(
        max_tokens=a.max_turn_tokens,
        max_context=2048,
        temperature=a.temperature,
        constrain_tool_calls=not a.no_constrain,
        close_calls_in_budget=a.close_calls,
    )
    engine = LocalEngine(TransformersEngine(a.model), max_batch=64)
    started = time.monotonic()
    try:
        with LocalStack(a.tasks, split=a.split) as stack:
            with ControllerClient(stack.url) as client:
                samples = {t: client.get_indices(t)[: a.n] for t in a.tasks}
            episodes = evaluate(stack.url, engine, engine.engine.tokenizer, engine.stop_token_ids, samples, settings)
    finally:
        engine.close()
    summary = summarize(episodes)
    result = {
        "split": a.split,
        "model": a.model or "SmolLM2-135M-Instruct",
        "temperature": a.temperature,
        "constrain_tool_calls": not a.no_constrain,
        "close_calls_in_budget": a.close_calls,
        "text_answer_tasks": list(settings.text_answer_tasks),
        "max_turn_tokens": a.max_turn_tokens,
        "seconds": round(time.monotonic() - started, 1),
        **summary,
        "statuses": {s: sum(e.status == s for e in episodes) for s in sorted({e.status for e in episodes})},
        "transcripts": [
            {"task": e.spec.task, "index": e.spec.index, "reward": e.reward, "status": e.status, "text": _tail(e, engine)}
            for t in a.tasks
            for e in [x for x in episodes if x.spec.task == t][: a.transcripts]
        ],
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    for task, block in summary["per_task"].items():
        print(f"{task:>6}: success {block['mean_reward']:.3f} ± {block['stderr']:.3f} over {block['episodes']} episodes")
    print(f"   all: {summary['mean_reward']:.3f} ± {summary['stderr']:.3f}  ({result['seconds']:.0f} s) -> {a.out}")
    return result


if __name__ == "__main__":
    main()
