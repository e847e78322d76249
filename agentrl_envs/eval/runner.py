"""The evaluation loop: every sample of every task as one episode against an OpenAI-compatible model.

Contract of :func:`evaluate`:

* one coroutine per episode, at most ``config.concurrency`` in flight over all tasks;
* an episode is the one agent loop (:func:`agentrl_envs.agent.run_episode`) with a
  :class:`ChatPolicy`: one chat-completions call with native ``tools`` per turn, until the
  controller says ``finish`` (or the client-side ``max_turns`` cap truncates it);
* who is at fault decides the outcome (see :mod:`agentrl_envs.errors`): an episode whose
  outcome is an infrastructure failure (controller, worker or network error, a model-API error,
  ``task error`` / ``cancelled``) restarts from scratch, up to ``max_retries`` times; if it still
  fails the episode is kept with ``infra_error`` set and is never scored. A full worker (HTTP
  406) is waited out with back-off for up to ``capacity_timeout`` seconds without using up a retry;
* a model prompt that exceeds the model's context is the model's failure: status
  ``agent context limit``, reward 0 (AgentRL does the same);
* ``success`` is ``reward >= 1.0`` (AgentBench counts a sample solved when its reward is 1).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import openai
from tqdm.auto import tqdm

from ..agent import MaxTurns, Outcome, run_episode
from ..client import AsyncControllerClient
from ..errors import ContextLimitError, InfrastructureError, ModelServerError
from ..schema import SampleIndex, SampleStatus
from .config import EvalConfig

log = logging.getLogger(__name__)

_CONTEXT_HINTS = ("context length", "context_length", "maximum context", "too long", "context window")


@dataclass
class EpisodeResult:
    """One evaluated sample. ``infra_error`` set means: not scored (excluded from every rate)."""

    task: str
    index: SampleIndex
    status: str
    reward: float = 0.0
    turns: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    infra_error: str | None = None
    attempts: int = 1
    seconds: float = 0.0

    @property
    def scored(self) -> bool:
        return self.infra_error is None

    @property
    def success(self) -> bool:
        return self.scored and self.reward >= 1.0


@dataclass
class EvalResult:
    """Every episode of a run, in task order then index order."""

    model: str
    config: EvalConfig
    episodes: list[EpisodeResult]
    seconds: float = 0.0

    def by_task(self) -> dict[str, list[EpisodeResult]]:
        grouped: dict[str, list[EpisodeResult]] = {t: [] for t in self.config.tasks}
        for ep in self.episodes:
            grouped.setdefault(ep.task, []).append(ep)
        return grouped


class _Retry(Exception):
    """An attempt failed for a reason nobody can blame the model for."""

    def __init__(self, reason: str, partial: EpisodeResult | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.partial = partial


def assistant_message(message: Any) -> dict[str, Any]:
    """The SDK's assistant message as a wire dict; tool-call ``arguments`` stay the raw JSON string."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    calls = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:  # a non-function ("custom") tool call: no env understands it
            continue
        calls.append(
            {"id": call.id, "type": "function", "function": {"name": function.name, "arguments": function.arguments or ""}}
        )
    if calls:
        out["tool_calls"] = calls
    return out


def _is_context_error(exc: openai.APIError) -> bool:
    if not isinstance(exc, openai.BadRequestError):
        return False
    text = f"{exc.message} {getattr(exc, 'code', '') or ''}".lower()
    return any(hint in text for hint in _CONTEXT_HINTS)


class ChatPolicy:
    """A model behind an OpenAI-compatible API as a policy: one chat-completions call per turn."""

    def __init__(self, oai: openai.AsyncOpenAI, model: str, config: EvalConfig) -> None:
        self.oai = oai
        self.model = model
        self.config = config

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if tools:
            request["tools"] = tools
            if self.config.tool_choice is not None:
                request["tool_choice"] = self.config.tool_choice
        if self.config.seed is not None:
            request["seed"] = self.config.seed
        return request

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            completion = await self.oai.chat.completions.create(**self.request(messages, tools))
        except openai.APIError as e:
            if _is_context_error(e):
                raise ContextLimitError(f"{type(e).__name__}: {e}") from e
            raise ModelServerError(f"model API: {type(e).__name__}: {e}") from e
        if not completion.choices:
            raise ModelServerError("model API returned no choices")
        return assistant_message(completion.choices[0].message)


class _Evaluator:
    def __init__(self, config: EvalConfig, model: str, oai: openai.AsyncOpenAI, controller: AsyncControllerClient) -> None:
        self.config = config
        self.model = model
        self.oai = oai
        self.controller = controller

    def _delay(self, attempt: int) -> float:
        """Exponential backoff with jitter: retry_backoff · 2^attempt (at most 30 s) · [0.5, 1)."""
        return min(self.config.retry_backoff * 2**attempt, 30.0) * (0.5 + random.random() / 2)

    async def _backoff(self, attempt: int) -> None:
        await asyncio.sleep(self._delay(attempt))

    async def indices(self, task: str) -> list[SampleIndex]:
        """The task's indices (first ``limit``); infrastructure failures are retried, then raised."""
        for attempt in range(self.config.max_retries + 1):
            try:
                indices = await self.controller.get_indices(task)
                break
            except InfrastructureError:
                if attempt == self.config.max_retries:
                    raise
                await self._backoff(attempt)
        return indices[: self.config.limit] if self.config.limit is not None else indices

    async def _attempt(self, task: str, index: SampleIndex) -> EpisodeResult:
        """Run one episode once; raise :class:`_Retry` when the failure is not the model's."""
        t = await run_episode(
            self.controller,
            task,
            index,
            ChatPolicy(self.oai, self.model, self.config),
            stops=[MaxTurns(self.config.max_turns)] if self.config.max_turns is not None else [],
            start_timeout=self.config.capacity_timeout,
            start_delay=lambda n: self._delay(min(n, 4)),
        )
        ep = EpisodeResult(
            task=task,
            index=index,
            status=t.status.value,
            reward=t.reward,
            turns=t.turns,
            messages=t.messages,
            tools=t.tools,
            metrics=t.metrics,
        )
        if t.outcome is Outcome.INFRA_FAILURE:
            raise _Retry(t.error or f"episode ended with status {t.status.value!r}", ep)
        return ep

    async def episode(self, task: str, index: SampleIndex) -> EpisodeResult:
        """Run one sample with retries from scratch; never raises for infrastructure failures."""
        started = time.monotonic()
        last: _Retry | None = None
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            try:
                ep = await self._attempt(task, index)
                ep.attempts = attempt + 1
                ep.seconds = time.monotonic() - started
                return ep
            except _Retry as e:
                log.warning("%s #%s attempt %d/%d failed: %s", task, index, attempt + 1, self.config.max_retries + 1, e.reason)
                last = e
        assert last is not None
        ep = last.partial or EpisodeResult(task=task, index=index, status=SampleStatus.UNKNOWN.value)
        if ep.status == SampleStatus.RUNNING.value:
            ep.status = SampleStatus.UNKNOWN.value
        ep.infra_error, ep.attempts, ep.seconds = last.reason, self.config.max_retries + 1, time.monotonic() - started
        return ep


async def resolve_model(oai: openai.AsyncOpenAI, model: str | None) -> str:
    """``model`` if given, else the first model the server lists at ``/v1/models``."""
    if model:
        return model
    page = await oai.models.list()
    models = [m.id for m in page.data]
    if not models:
        raise ValueError(f"the model server at {oai.base_url} lists no models; pass --model")
    return models[0]


def openai_client(config: EvalConfig, **kwargs: Any) -> openai.AsyncOpenAI:
    """The OpenAI SDK client for ``config`` (``kwargs`` go to ``AsyncOpenAI``, e.g. ``http_client``)."""
    if config.base_url is None:
        raise ValueError("EvalConfig.base_url is None: start a model server first (run_eval does) or pass --base-url")
    api_key = config.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    return openai.AsyncOpenAI(
        base_url=config.base_url, api_key=api_key, timeout=config.model_timeout, max_retries=config.sdk_max_retries, **kwargs
    )


async def evaluate(config: EvalConfig, *, oai: openai.AsyncOpenAI | None = None) -> EvalResult:
    """Evaluate ``config.tasks`` on a running controller (``config.controller`` must be set).

    ``oai`` replaces the SDK client built from ``config`` (tests, custom transports).
    Raises :class:`~agentrl_envs.errors.InfrastructureError` only when a task's indices cannot be
    fetched after ``max_retries`` retries; episode failures are recorded, never raised.
    """
    if config.controller is None:
        raise ValueError("EvalConfig.controller is None: start the embedded stack first (run_eval does) or pass --controller")
    started = time.monotonic()
    owns_oai = oai is None
    oai = oai or openai_client(config)
    try:
        model = await resolve_model(oai, config.model)
        async with AsyncControllerClient(config.controller, max_connections=max(2 * config.concurrency, 16)) as controller:
            evaluator = _Evaluator(config, model, oai, controller)
            indices = {task: await evaluator.indices(task) for task in config.tasks}
            episodes = await _run_all(evaluator, indices, config)
    finally:
        if owns_oai:
            await oai.close()
    return EvalResult(model=model, config=config, episodes=episodes, seconds=time.monotonic() - started)


async def _run_all(evaluator: _Evaluator, indices: dict[str, list[SampleIndex]], config: EvalConfig) -> list[EpisodeResult]:
    semaphore = asyncio.Semaphore(config.concurrency)
    bars = {
        task: tqdm(total=len(idx), desc=task, position=pos, leave=True, disable=not config.progress, unit="ep")
        for pos, (task, idx) in enumerate(indices.items())
    }
    solved = dict.fromkeys(indices, 0)

    async def one(task: str, index: SampleIndex) -> EpisodeResult:
        async with semaphore:
            ep = await evaluator.episode(task, index)
        solved[task] += ep.success
        bars[task].update(1)
        bars[task].set_postfix(solved=solved[task], refresh=False)
        return ep

    try:
        return list(await asyncio.gather(*(one(task, i) for task, idx in indices.items() for i in idx)))
    finally:
        for bar in bars.values():
            bar.close()
