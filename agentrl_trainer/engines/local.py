"""A transformers engine in the trainer's process that batches concurrent episodes' turns."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agentrl_envs.models.engine import TransformersEngine

from .busy import BusyClock

__all__ = ["LocalEngine"]

log = logging.getLogger(__name__)

HEAD_KEY_TOKENS = 64  # prompts whose first tokens agree are sampled together

# prompt ids, max tokens, temperature, top_p, tools to constrain the turn to (or None), future, loop
_Request = tuple[list[int], int, float, float, Any, asyncio.Future, asyncio.AbstractEventLoop]


class LocalEngine:
    """Wraps :class:`agentrl_envs.models.engine.TransformersEngine` (the model server's engine).

    ``generate`` may be awaited by many episodes at once: a worker thread gathers the requests
    that arrive within ``batch_wait_s`` (up to ``max_batch``) and samples them in one batched
    decode. ``load_weights`` copies tensors into the model by parameter name between batches.
    A request with ``tools`` is sampled under the tool-call grammar (:mod:`agentrl_envs.models.grammar`):
    exactly one well-formed call to one of them.
    """

    def __init__(
        self, engine: TransformersEngine, *, max_batch: int = 32, batch_wait_s: float = 0.02, name: str = "engine"
    ) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.name = name
        self.version = 0
        self._clock = BusyClock()
        self.batches = 0
        self.generated_tokens = 0
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=f"{name}-sampler", daemon=True)
        self._thread.start()

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: Any, **kwargs: Any) -> LocalEngine:
        """An engine around ``model`` (pass a copy: the engine switches it to eval mode, no grad)."""
        model.eval()
        model.requires_grad_(False)
        return cls(TransformersEngine.from_model(model, tokenizer), **kwargs)

    @property
    def busy_seconds(self) -> float:
        """Wall time spent sampling, the batch in progress included."""
        return self._clock.seconds

    @property
    def stop_token_ids(self) -> list[int]:
        return sorted(self.engine.stop_token_ids)

    async def generate(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float, tools: Sequence[Any] | None = None
    ) -> tuple[list[int], list[float]]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._queue.put((list(prompt_ids), max_tokens, temperature, top_p, tools or None, fut, loop))
        return await fut

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=max(left, 0)) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            # One batched decode per sampling setting and prompt head: prompts of one task share
            # their system prompt and tool schemas, which generate_batch then runs only once.
            by_sampling: dict[tuple[float, float, tuple[int, ...]], list[_Request]] = {}
            for req in batch:
                by_sampling.setdefault((req[2], req[3], tuple(req[0][:HEAD_KEY_TOKENS])), []).append(req)
            for (temperature, top_p, _head), reqs in by_sampling.items():
                with self._clock.busy():
                    try:
                        grammar = self.engine.tool_call_grammar() if any(r[4] for r in reqs) else None
                        matchers = [grammar.matcher(r[4]) if grammar and r[4] else None for r in reqs]
                        results: list[Any] = self.engine.generate_batch(
                            [r[0] for r in reqs],
                            [r[1] for r in reqs],
                            temperature=temperature,
                            top_p=top_p,
                            matchers=matchers if grammar else None,
                            grammar=grammar,
                        )
                    except Exception as e:  # every waiting episode learns of it
                        results = [e] * len(reqs)
                self.batches += 1
                for req, res in zip(reqs, results, strict=True):
                    fut, loop = req[5], req[6]
                    if isinstance(res, Exception):
                        loop.call_soon_threadsafe(_settle, fut, None, res)
                    else:
                        self.generated_tokens += len(res[0])
                        loop.call_soon_threadsafe(_settle, fut, res, None)

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``named`` tensors into the model (in place, between batches) and set ``version``.

        Names are the trainer model's parameter names (the engine holds a copy of that model).
        """
        self.engine.load_state_dict(named, strict=False)
        self.version = version

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)


def _settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
