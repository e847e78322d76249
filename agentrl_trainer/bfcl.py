"""BFCL as the demo's generalization test: the built-in model's figures on a held-out task it is
never trained on (AgentRL reports BFCL this way), before and after training.

:func:`evaluate_bfcl` plays the first ``limit`` entries of one BFCL split (task ``bfcl``,
``envs/bfcl``) with a fresh engine holding the trainer's weights as they are now, through the
same rollout code as the held-out evaluation, on a stack of its own that runs only for this
evaluation. BFCL's turns may be text (``bfcl`` joins the settings' ``text_answer_tasks``: the
grammar's auto mode), since its ``irrelevance`` entries are right only when nothing is called.
The result has the mean reward (= BFCL's accuracy over the entries played) and, from the
episodes' ``category`` metrics, :func:`agentrl_envs.eval.report.category_summary`'s categories,
groups and leaderboard-weighted score.

Single-turn splits only (``non_live_python`` or one of its categories): the trainer's rollout
refuses an episode whose tools change (``multi_turn_miss_func``), and the multi-turn splits'
prompts (4-7k tokens) do not fit the demo's 2,048-token context.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from agentrl_envs.client import ControllerClient
from agentrl_envs.eval.report import category_summary
from agentrl_envs.eval.results import EpisodeResult
from agentrl_envs.stack import LocalStack

from .evaluate import evaluate, summarize
from .rollout import Episode, RolloutSettings

if TYPE_CHECKING:
    from .trainer import AgentRLTrainer

__all__ = ["BFCL_SPLITS", "bfcl_problem", "categories", "evaluate_bfcl"]

TASK = "bfcl"
#: the splits the demo may evaluate: single-turn (one assistant message per entry)
BFCL_SPLITS = ("non_live_python", "simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


def bfcl_problem(split: str, train_tasks: list[str]) -> str | None:
    """Why BFCL cannot be the held-out test with these settings (one line with the fix), or None."""
    if TASK in train_tasks:
        return "bfcl is the held-out generalization test, never trained on: drop it from --tasks (or pass --bfcl-limit 0)"
    if split not in BFCL_SPLITS:
        return f"--bfcl-split {split!r}: the demo evaluates a single-turn split, one of {', '.join(BFCL_SPLITS)}"
    from agentrl_envs.registry import task_names

    if TASK not in task_names():
        return "the bfcl task is not installed: pip install -e envs/bfcl and pip install --no-deps bfcl-eval (make install does both), or pass --bfcl-limit 0"
    return None


def categories(episodes: list[Episode]) -> dict[str, Any]:
    """BFCL's categories, groups and weighted score of the episodes (the eval report's figures)."""
    results = [
        EpisodeResult(
            task=e.spec.task,
            index=e.spec.index,
            status=e.status,
            reward=e.reward,
            metrics=e.metrics,
            infra_error=(e.error or "infrastructure failure") if e.infra_failure else None,
        )
        for e in episodes
    ]
    return category_summary(results) or {}


def evaluate_bfcl(
    trainer: AgentRLTrainer, split: str, limit: int, settings: RolloutSettings, label: str, max_tokens: int
) -> dict[str, Any]:
    """The first ``limit`` entries of BFCL's ``split``, played greedily (``settings``' temperature)
    with ``max_tokens`` a turn by an engine of the trainer's current weights: BFCL's accuracy
    (``mean_reward``, ``stderr``, ``episodes``), ``categories``, ``groups``, ``category_score``,
    the ``split``, ``limit``, ``max_tokens`` and ``seconds``."""
    settings = dataclasses.replace(settings, text_answer_tasks=(*settings.text_answer_tasks, TASK), max_tokens=max_tokens)
    started = time.monotonic()
    with LocalStack([TASK], split=split) as stack:
        with ControllerClient(stack.url) as client:
            indices = client.get_indices(TASK)[:limit]
        engine = trainer.local_engine(f"bfcl-{label}", max_batch=32)
        try:
            episodes = evaluate(stack.url, engine, trainer.processing_class, engine.stop_token_ids, {TASK: indices}, settings)
        finally:
            engine.close()
    summary = summarize(episodes)
    summary.pop("per_task", None)  # one task
    return {
        "split": split,
        "limit": limit,
        "max_tokens": max_tokens,
        **summary,
        **categories(episodes),
        "indices": indices,
        "seconds": time.monotonic() - started,
    }
