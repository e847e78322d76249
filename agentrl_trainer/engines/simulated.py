"""A simulated engine: no model, a long-tailed latency per turn. For benchmarks only.

Real agent rollouts have long-tailed turn times (long generations, slow tools). This engine
reproduces only that: each ``generate`` sleeps for a latency drawn from a log-normal
distribution (median ``median_s``, shape ``sigma``; sigma = 1.5 puts the 99th percentile at ~33×
the median), then returns the tokens of ``respond(prompt_text)`` with a fixed logprob. The
async-vs-sync benchmark uses it to measure the pipeline's scheduling, not a model.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..rollout import TurnSample
from .busy import BusyClock

__all__ = ["SimulatedEngine"]


class SimulatedEngine:
    def __init__(
        self,
        tokenizer: Any,
        respond: Callable[[str], str],
        *,
        median_s: float = 0.05,
        sigma: float = 1.5,
        seed: int = 0,
        stop_token_id: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.respond = respond
        self.median_s = median_s
        self.sigma = sigma
        self._rng = random.Random(seed)
        self.stop_token_id = stop_token_id if stop_token_id is not None else tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.version = 0
        self._clock = BusyClock()

    @property
    def busy_seconds(self) -> float:
        """Wall time with at least one generation in flight, the current busy period included."""
        return self._clock.seconds

    def latency(self) -> float:
        return self.median_s * self._rng.lognormvariate(0.0, self.sigma)

    async def generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        temperature: float,
        top_p: float,
        tools: Any = None,
        *,
        call_required: bool = True,
        close_in_budget: bool = False,
        seed: int | None = None,
    ) -> TurnSample:
        # tools, call_required and close_in_budget (a tool-call constraint) are ignored: the reply
        # comes from ``respond``; ``seed`` too (the latency draws come from the engine's own seed)
        version = self.version  # a turn is labelled with the weights it started under
        with self._clock.busy():
            await asyncio.sleep(self.latency())
        text = self.respond(self.tokenizer.decode(prompt_ids))
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])[: max(max_tokens - 1, 0)] + [self.stop_token_id]
        return TurnSample(ids, [-1.0] * len(ids), version)

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        self.version = version

    def close(self) -> None:
        pass
