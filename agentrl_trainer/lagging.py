"""Lagging rollout engines (AgentRL's cross-policy sampling), as pure functions.

Of ``num_engines`` engines, ``lagging_engine_ids`` picks the lagging ones (the last
``round(fraction × n)``); they take new weights only on steps that are multiples of
``lag_steps`` (every step for the others). For each turn of an episode,
``choose_engine`` picks a lagging engine with probability ``p`` and a current one otherwise, so
one trajectory mixes the two policies; the loss then uses the logprobs of whichever engine
produced each token.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["choose_engine", "engines_to_sync", "lagging_engine_ids"]


def lagging_engine_ids(num_engines: int, fraction: float) -> list[int]:
    """Ids of the lagging engines: the last ``round(fraction × num_engines)``, never all of them."""
    if num_engines < 1:
        raise ValueError("num_engines must be at least 1")
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must be in [0, 1); got {fraction}")
    count = min(int(round(fraction * num_engines)), num_engines - 1)
    return list(range(num_engines - count, num_engines))


def engines_to_sync(step: int, num_engines: int, lagging: Sequence[int], lag_steps: int) -> list[int]:
    """Engines that take the weights of optimizer step ``step`` (1-based): current ones always,
    lagging ones only when ``step % lag_steps == 0``."""
    if lag_steps < 1:
        raise ValueError("lag_steps must be at least 1")
    lag = set(lagging)
    return [e for e in range(num_engines) if e not in lag or step % lag_steps == 0]


def choose_engine(rng: random.Random, current: Sequence[int], lagging: Sequence[int], p: float, turn_key: int = 0) -> int:
    """The engine for one turn: a lagging one with probability ``p`` (if any), else a current one.

    Within the chosen kind, ``turn_key`` (e.g. the episode id) spreads turns round-robin.
    """
    if not current:
        raise ValueError("at least one engine must be current")
    pool = lagging if lagging and rng.random() < p else current
    return pool[turn_key % len(pool)]
