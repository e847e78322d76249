"""Held-out evaluation with the rollout machinery the trainer uses (same prompts, same parsing).

``evaluate`` plays every sample index of each task ``repeats`` times with one engine and
returns the episodes; ``summarize`` gives the mean reward and its standard error per task and
overall. Infrastructure failures are retried, never scored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.protocol.agentrl import SampleIndex

from .rollout import EngineChoice, Episode, EpisodeSpec, RolloutEngine, RolloutSettings, run_episode_retrying

__all__ = ["evaluate", "pass_at_k", "summarize"]

log = logging.getLogger(__name__)


async def _evaluate(
    controller_url: str,
    engine: RolloutEngine,
    tokenizer: Any,
    stop_token_ids: Sequence[int],
    samples: Mapping[str, Sequence[SampleIndex]],
    settings: RolloutSettings,
    repeats: int,
    concurrency: int,
    retries: int,
) -> list[Episode]:
    choice = EngineChoice(engine, 0, False)
    gate = asyncio.Semaphore(concurrency)
    specs = [
        EpisodeSpec(task, index, group_id=n, episode_id=n * repeats + r)
        for n, (task, index) in enumerate((t, i) for t, idx in samples.items() for i in idx)
        for r in range(repeats)
    ]
    done, successes, started = 0, 0, time.monotonic()
    replays = dataclasses.replace(settings, infra_retries=retries)
    every = max(1, len(specs) // 10)  # progress at each tenth: an evaluation can take many minutes
    async with AsyncControllerClient(controller_url) as client:

        async def one(spec: EpisodeSpec) -> Episode:
            nonlocal done, successes
            async with gate:
                # the training pipeline's replays: each samples afresh (its own turn seeds), so a
                # failure the sampled text caused does not recur in every replay
                ep = await run_episode_retrying(client, spec, lambda _turn: choice, tokenizer, list(stop_token_ids), replays)
                if ep.infra_failure:  # not scored: say why
                    log.warning(
                        "%s sample %s lost to the infrastructure after %d plays: %s", spec.task, spec.index, ep.attempts, ep.error
                    )
            done += 1
            successes += ep.reward >= 1.0
            if done % every == 0 or done == len(specs):
                log.info(
                    "evaluated %d/%d episodes (%d successes) in %.0f s", done, len(specs), successes, time.monotonic() - started
                )
            return ep

        return list(await asyncio.gather(*(one(s) for s in specs)))


def evaluate(
    controller_url: str,
    engine: RolloutEngine,
    tokenizer: Any,
    stop_token_ids: Sequence[int],
    samples: Mapping[str, Sequence[SampleIndex]],
    settings: RolloutSettings,
    *,
    repeats: int = 1,
    concurrency: int = 32,
    retries: int = 2,
) -> list[Episode]:
    """Run the episodes (blocking; call from a thread without a running event loop)."""
    return asyncio.run(
        _evaluate(controller_url, engine, tokenizer, stop_token_ids, samples, settings, repeats, concurrency, retries)
    )


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Mean reward, standard error (sample std / √n), success rate and counts, overall and per task;
    the episodes lost to the infrastructure are not scored but counted (``infra_failures``) and
    their errors tallied (``infra_errors``)."""
    scored = [e for e in episodes if not e.infra_failure]

    def block(eps: Sequence[Episode]) -> dict[str, Any]:
        mean, se = _mean_se([e.reward for e in eps])
        return {
            "episodes": len(eps),
            "mean_reward": mean,
            "stderr": se,
            "success_rate": sum(e.reward >= 1.0 for e in eps) / max(len(eps), 1),
            "completed_rate": sum(e.completed for e in eps) / max(len(eps), 1),
            "turns_mean": sum(e.turns for e in eps) / max(len(eps), 1),
        }

    out = block(scored)
    out["infra_failures"] = len(episodes) - len(scored)
    # why they were lost, by task and error (its first 200 characters), most frequent first
    lost = Counter(f"{e.spec.task}: {(e.error or 'no error recorded')[:200]}" for e in episodes if e.infra_failure)
    out["infra_errors"] = dict(lost.most_common())
    out["per_task"] = {t: block([e for e in scored if e.spec.task == t]) for t in dict.fromkeys(e.spec.task for e in scored)}
    return out


def pass_at_k(episodes: Sequence[Episode], k: int) -> dict[str, Any]:
    """pass@k from ``k`` sampled episodes per held-out sample (``evaluate(..., repeats=k)``): the
    share of samples with at least one success (reward 1) among their episodes, with its standard
    error over samples, overall and per task. A sample with fewer than ``k`` scored episodes (the
    rest lost to the infrastructure) counts over the ones it has; ``short_samples`` counts them."""
    by_sample: dict[tuple[str, int], list[Episode]] = {}
    for e in episodes:
        if not e.infra_failure:
            by_sample.setdefault((e.spec.task, e.spec.group_id), []).append(e)

    def block(keys: Sequence[tuple[str, int]]) -> dict[str, Any]:
        mean, se = _mean_se([float(any(e.reward >= 1.0 for e in by_sample[key])) for key in keys])
        return {"samples": len(keys), "pass_at_k": mean, "stderr": se}

    keys = list(by_sample)
    out = block(keys)
    out["k"] = k
    out["short_samples"] = sum(len(v) < k for v in by_sample.values())
    out["per_task"] = {t: block([key for key in keys if key[0] == t]) for t in dict.fromkeys(key[0] for key in keys)}
    return out
