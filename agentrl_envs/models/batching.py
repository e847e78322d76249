"""Concurrent requests sampled together: one batched decode for the turns that wait at once.

:class:`BatchSampler` is the sampling layer shared by the model server and the RL trainer's
local engine (``agentrl_trainer.engines.local``). ``await sampler.generate(prompt_ids, ...)`` may
be called by many coroutines (from any event loop): a sampler thread takes the first waiting
request, gathers those that arrive within ``batch_wait_s`` (up to ``max_batch``) and samples
them with :meth:`.engine.TransformersEngine.generate_batch`, one decode per sampling setting and
prompt head (prompts of one task share their system prompt and tool schemas, which the batch then
runs once). Requests that arrive while a batch decodes wait for the next batch (static batching:
a running decode is not joined). A request given ``tools`` is sampled under the tool-call grammar
of those tools (:mod:`.grammar`). Rows of a batch share one random generator, seeded by the
first request's ``seed``: a seed reproduces an answer only when its request is decoded alone
(OpenAI's ``seed`` is best-effort too); greedy answers (temperature 0) equal the solo ones.

:class:`BatchedChat` puts the chat halves of the engine (:meth:`~.engine.TransformersEngine.prepare_chat`,
:meth:`~.engine.TransformersEngine.finish_chat`) around a sampler: the model server's engine.

On two CPU cores, 16 concurrent requests decode as one batch at a fraction of the cost of 16
sequential decodes: ``benchmarks/model_server.py`` measures it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schema import Message, ToolDefinition
from .engine import ChatGeneration, TransformersEngine

__all__ = ["BatchSampler", "BatchedChat"]

HEAD_KEY_TOKENS = 64  # prompts whose first tokens agree are sampled together


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    tools: Sequence[Any] | None
    seed: int | None
    future: asyncio.Future = field(repr=False)
    loop: asyncio.AbstractEventLoop = field(repr=False)

    def key(self) -> tuple[Any, ...]:
        # Not the seed: seeded requests decode together too (one generator per batch, seeded by
        # the first request's seed), so a seed reproduces an answer only when sent alone.
        return (self.temperature, self.top_p, tuple(self.prompt_ids[:HEAD_KEY_TOKENS]))


class BatchSampler:
    """Samples the completions of concurrent requests in batched decodes on one thread.

    ``busy_seconds`` (wall time spent decoding, the batch in progress included), ``batches`` and
    ``generated_tokens`` count the work done. ``close()`` stops the thread after the batch in
    progress; requests still waiting then fail with ``RuntimeError``.
    """

    def __init__(
        self, engine: TransformersEngine, *, max_batch: int = 32, batch_wait_s: float = 0.02, name: str = "sampler"
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.engine = engine
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.batches = 0
        self.generated_tokens = 0
        self._busy_done = 0.0
        self._busy_since: float | None = None
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"{name}-batches", daemon=True)
        self._thread.start()

    @property
    def busy_seconds(self) -> float:
        since = self._busy_since
        return self._busy_done + (time.monotonic() - since if since is not None else 0.0)

    async def generate(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        tools: Sequence[Any] | None = None,
        seed: int | None = None,
    ) -> tuple[list[int], list[float]]:
        """``(completion_ids, logprobs)`` of one prompt, as :meth:`~.engine.TransformersEngine.generate_batch`
        samples it (stop token kept last; logprobs of the unconstrained softmax)."""
        if self._closed:
            raise RuntimeError("the sampler is closed")
        self.engine.check_prompt_length(prompt_ids)  # refused alone, not with the batch it would join
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._queue.put(_Request(list(prompt_ids), max_tokens, temperature, top_p, tools or None, seed, future, loop))
        return await future

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=60)
        while True:  # whatever was queued behind the stop
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                break
            if req is not None:
                req.loop.call_soon_threadsafe(_settle, req.future, None, RuntimeError("the sampler is closed"))

    # ------------------------------------------------------------------ the sampler thread

    def _gather(self, first: _Request) -> tuple[list[_Request], bool]:
        batch, stop = [first], False
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch:
            left = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                stop = True
                break
            batch.append(item)
        return batch, stop

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._gather(first)
            groups: dict[tuple[Any, ...], list[_Request]] = {}
            for req in batch:
                groups.setdefault(req.key(), []).append(req)
            for reqs in groups.values():
                self._busy_since = time.monotonic()
                try:
                    results: list[Any] = self._decode(reqs)
                except Exception as e:  # every request of the batch learns of it
                    results = [e] * len(reqs)
                finally:
                    self._busy_done += time.monotonic() - self._busy_since
                    self._busy_since = None
                self.batches += 1
                for req, res in zip(reqs, results, strict=True):
                    if isinstance(res, Exception):
                        req.loop.call_soon_threadsafe(_settle, req.future, None, res)
                    else:
                        self.generated_tokens += len(res[0])
                        req.loop.call_soon_threadsafe(_settle, req.future, res, None)
            if stop:
                return

    def _decode(self, reqs: list[_Request]) -> list[tuple[list[int], list[float]]]:
        first = reqs[0]
        grammar = self.engine.tool_call_grammar() if any(r.tools for r in reqs) else None
        matchers = [grammar.matcher(r.tools) if grammar is not None and r.tools else None for r in reqs]
        return self.engine.generate_batch(
            [r.prompt_ids for r in reqs],
            [r.max_tokens for r in reqs],
            temperature=first.temperature,
            top_p=first.top_p,
            seed=first.seed,
            matchers=matchers if grammar is not None else None,
            grammar=grammar,
        )


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class BatchedChat:
    """The model server's engine: chat requests answered through a :class:`BatchSampler`.

    ``await chat.agenerate(...)`` takes and returns what :meth:`.engine.TransformersEngine.generate`
    does; concurrent calls are sampled together.
    """

    def __init__(self, engine: TransformersEngine, *, max_batch: int = 16, batch_wait_s: float = 0.01) -> None:
        self.engine = engine
        self.name = engine.name
        self.sampler = BatchSampler(engine, max_batch=max_batch, batch_wait_s=batch_wait_s, name="chat")

    async def agenerate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tool_choice: Any = None,
    ) -> ChatGeneration:
        prepared = await asyncio.to_thread(self.engine.prepare_chat, messages, tools, tool_choice)
        completion_ids, _ = await self.sampler.generate(
            prepared.prompt_ids, max_tokens, temperature, top_p, tools=prepared.forced_tools, seed=seed
        )
        return await asyncio.to_thread(self.engine.finish_chat, prepared, completion_ids)

    def generate(self, *args: Any, **kwargs: Any) -> ChatGeneration:
        """One request, synchronously (outside an event loop)."""
        return asyncio.run(self.agenerate(*args, **kwargs))

    def close(self) -> None:
        self.sampler.close()
