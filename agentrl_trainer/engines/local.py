"""A transformers engine in the trainer's process that batches concurrent episodes' turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.chat.sampling import BatchSampler

from ..rollout import TurnSample

__all__ = ["LocalEngine"]


class LocalEngine:
    """Wraps :class:`agentrl_envs.chat.engine.TransformersEngine` with the SDK's batching sampler.

    ``generate`` may be awaited by many episodes at once: :class:`agentrl_envs.chat.sampling.BatchSampler`
    decodes them in one continuously batched decode (``max_slot_tokens`` and ``prefix_cache_tokens``
    bound its KV memory, see the sampler; a turn that arrives joins the running rows;
    the model server batches its requests the same way). ``load_weights`` drains the running rows,
    then copies tensors into the model by parameter name, so no turn mixes two weight versions. A
    request with ``tools`` is sampled under the tool-call grammar (:mod:`agentrl_envs.chat.grammar`):
    exactly one well-formed call to one of them, or with ``call_required=False`` any text in which
    a call, once opened, is well-formed; with ``close_in_budget`` a call still open when the turn's
    tokens are nearly spent is completed rather than cut. Its logprobs are the behaviour policy's:
    under the distribution each token was drawn from, the grammar's allowed tokens (returned with
    them) renormalized. A ``seed`` seeds the turn's generator.
    """

    def __init__(
        self,
        engine: TransformersEngine,
        *,
        max_batch: int = 32,
        max_slot_tokens: int = 0,
        prefix_cache_tokens: int = 16384,
        batch_wait_s: float = 0.02,
        name: str = "engine",
    ) -> None:
        self.engine = engine
        self.name = name
        self.version = 0
        self.sampler = BatchSampler(
            engine,
            max_batch=max_batch,
            max_slot_tokens=max_slot_tokens,
            prefix_cache_tokens=prefix_cache_tokens,
            batch_wait_s=batch_wait_s,
            name=name,
        )

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: Any, *, num_threads: int | None = None, **kwargs: Any) -> LocalEngine:
        """An engine around ``model`` (pass a copy: the engine switches it to eval mode, no grad),
        decoding with ``num_threads`` torch threads (``None``: all cores)."""
        model.eval()
        model.requires_grad_(False)
        return cls(TransformersEngine.from_model(model, tokenizer, num_threads=num_threads), **kwargs)

    @property
    def busy_seconds(self) -> float:
        """Wall time spent sampling, the batch in progress included."""
        return self.sampler.busy_seconds

    @property
    def batches(self) -> int:
        return self.sampler.batches

    @property
    def generated_tokens(self) -> int:
        return self.sampler.generated_tokens

    @property
    def stop_token_ids(self) -> list[int]:
        return sorted(self.engine.stop_token_ids)

    async def generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        temperature: float,
        top_p: float,
        tools: Sequence[Any] | None = None,
        *,
        call_required: bool = True,
        close_in_budget: bool = False,
        seed: int | None = None,
    ) -> TurnSample:
        done = await self.sampler.generate(
            prompt_ids,
            max_tokens,
            temperature,
            top_p,
            tools=tools,
            seed=seed,
            call_required=call_required,
            close_in_budget=close_in_budget,
        )
        restricted = any(a is not None for a in done.allowed)
        return TurnSample(
            done.completion_ids,
            done.sampled_logprobs,
            done.weights_version,
            done.allowed if restricted else None,
            done.logprobs,
        )

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``named`` tensors into the model (in place, with no turn decoding) and set ``version``.

        Names are the trainer model's parameter names (the engine holds a copy of that model).
        """
        with self.sampler.exclusive():
            self.engine.load_state_dict(named, strict=False)
            self.version = version
            self.sampler.weights_version = version  # the label each completion carries

    def close(self) -> None:
        self.sampler.close()
