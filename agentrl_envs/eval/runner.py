"""The evaluation loop: every sample of every task as one episode against an OpenAI-compatible model.

Contract of :func:`evaluate`:

* one coroutine per episode, at most ``config.concurrency`` in flight over all tasks;
* an episode is the one agent loop (:func:`agentrl_envs.agent.run_episode`) with a
  :class:`ChatPolicy`: one chat-completions call with native ``tools`` per turn, until the
  controller says ``finish`` (or the client-side ``max_turns`` cap truncates it);
* who is at fault decides the outcome (see :mod:`agentrl_envs.errors`): an episode whose
  outcome is an infrastructure failure (controller, worker or network error, a model-API error,
  ``task error`` / ``cancelled``, a session lost to a controller restart: ``410 session_lost``)
  restarts from scratch, up to ``max_retries`` times; if it still fails the episode is kept
  with ``infra_error`` set and is never scored. A full worker (HTTP
  406) is waited out with back-off for up to ``capacity_timeout`` seconds without using up a retry;
* a model prompt that exceeds the model's context is the model's failure: status
  ``agent context limit``, reward 0 (AgentRL does the same);
* ``success`` is ``reward >= 1.0`` (AgentBench counts a sample solved when its reward is 1);
* every (model, task, index, run) is one episode: ``config.runs`` independent episodes per
  sample and model, played run by run (all of run 0 first), models side by side;
* with a :class:`~agentrl_envs.eval.store.RunStore`, each episode is appended to the store's
  ``trajectories.jsonl`` the moment it ends, and a resumed store's scored episodes are not
  played again (its infrastructure failures are);
* the model API's ``usage`` (prompt and completion tokens) is summed per episode, over every
  attempt of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import openai
from tqdm.auto import tqdm

from ..agent import MaxTurns, Outcome, run_episode
from ..client import AsyncControllerClient
from ..errors import ContextLimitError, InfrastructureError, ModelServerError
from ..protocol.agentrl import SampleIndex, SampleStatus
from .config import EvalConfig, ModelSlot
from .results import EpisodeKey, EpisodeResult, EvalResult

if TYPE_CHECKING:
    from .store import RunStore

log = logging.getLogger(__name__)

_CONTEXT_HINTS = ("context length", "context_length", "maximum context", "too long", "context window")


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


def _api_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message as sent to the model API: an assistant turn that only calls tools gets content
    ``""``, not ``null`` or no key. OpenAI takes all three; llama.cpp's server (llama-cpp-python
    0.3.36, chatml-function-calling) answers HTTP 500 to the other two (docs/peers.md)."""
    if m.get("role") == "assistant" and m.get("content") is None:
        return {**m, "content": ""}
    return m


class ChatPolicy:
    """A model behind an OpenAI-compatible API as a policy: one chat-completions call per turn."""

    def __init__(self, oai: openai.AsyncOpenAI, model: str, config: EvalConfig) -> None:
        self.oai = oai
        self.model = model
        self.config = config
        #: Tokens the API reported (``usage``) over this policy's calls.
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [_api_message(m) for m in messages],
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
        usage = getattr(completion, "usage", None)
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens or 0
            self.completion_tokens += usage.completion_tokens or 0
        if not completion.choices:
            raise ModelServerError("model API returned no choices")
        return assistant_message(completion.choices[0].message)


@dataclass
class _Model:
    """One model of the run: its label in the results, the name sent to the API, its client."""

    label: str
    name: str
    oai: openai.AsyncOpenAI


class _Evaluator:
    def __init__(self, config: EvalConfig, controller: AsyncControllerClient) -> None:
        self.config = config
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

    async def _attempt(self, model: _Model, task: str, index: SampleIndex) -> EpisodeResult:
        """Run one episode once; raise :class:`_Retry` when the failure is not the model's."""
        policy = ChatPolicy(model.oai, model.name, self.config)
        t = await run_episode(
            self.controller,
            task,
            index,
            policy,
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
            model=model.label,
            prompt_tokens=policy.prompt_tokens,
            completion_tokens=policy.completion_tokens,
        )
        if t.outcome is Outcome.INFRA_FAILURE:
            raise _Retry(t.error or f"episode ended with status {t.status.value!r}", ep)
        return ep

    async def episode(self, model: _Model, task: str, index: SampleIndex, run: int = 0) -> EpisodeResult:
        """Run one sample with retries from scratch; never raises for infrastructure failures.

        The tokens of failed attempts are added to the episode's: they were spent on it."""
        started = time.monotonic()
        last: _Retry | None = None
        spent = [0, 0]
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                await self._backoff(attempt - 1)
            try:
                ep = await self._attempt(model, task, index)
                ep.attempts = attempt + 1
                break
            except _Retry as e:
                log.warning(
                    "%s %s #%s attempt %d/%d failed: %s",
                    model.label, task, index, attempt + 1, self.config.max_retries + 1, e.reason,
                )  # fmt: skip
                if e.partial is not None:
                    spent[0] += e.partial.prompt_tokens
                    spent[1] += e.partial.completion_tokens
                last = e
        else:
            assert last is not None
            ep = last.partial or EpisodeResult(task=task, index=index, status=SampleStatus.UNKNOWN.value, model=model.label)
            if ep.status == SampleStatus.RUNNING.value:
                ep.status = SampleStatus.UNKNOWN.value
            ep.infra_error, ep.attempts = last.reason, self.config.max_retries + 1
            ep.prompt_tokens = ep.completion_tokens = 0
        ep.run, ep.seconds = run, time.monotonic() - started
        ep.prompt_tokens += spent[0]
        ep.completion_tokens += spent[1]
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


def model_labels(names: list[str]) -> list[str]:
    """Labels of the run's models in the results: their names, ``name#2``... for a name given twice
    (one model behind two endpoints, or two servers each listing it first)."""
    labels: list[str] = []
    for name in names:
        label, n = name, 1
        while label in labels:
            n += 1
            label = f"{name}#{n}"
        labels.append(label)
    return labels


def openai_client(config: EvalConfig, slot: ModelSlot | None = None, **kwargs: Any) -> openai.AsyncOpenAI:
    """The OpenAI SDK client for one model of ``config`` (default: the first); ``kwargs`` go to
    ``AsyncOpenAI``, e.g. ``http_client``."""
    slot = slot or config.model_slots()[0]
    if slot.base_url is None:
        raise ValueError("EvalConfig.base_url is None: start a model server first (run_eval does) or pass --base-url")
    api_key = slot.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    return openai.AsyncOpenAI(
        base_url=slot.base_url, api_key=api_key, timeout=config.model_timeout, max_retries=config.sdk_max_retries, **kwargs
    )


async def evaluate(config: EvalConfig, *, oai: openai.AsyncOpenAI | None = None, store: RunStore | None = None) -> EvalResult:
    """Evaluate ``config.tasks`` on a running controller (``config.controller`` must be set).

    ``oai`` replaces the SDK clients built from ``config`` (tests, custom transports): every model
    is asked through it. ``store`` records the run as it goes (and, when it was opened to resume,
    supplies the episodes already scored). Raises :class:`~agentrl_envs.errors.InfrastructureError`
    only when a task's indices cannot be fetched after ``max_retries`` retries; episode failures
    are recorded, never raised.
    """
    if config.controller is None:
        raise ValueError("EvalConfig.controller is None: start the embedded stack first (run_eval does) or pass --controller")
    started = time.monotonic()
    slots = config.model_slots()
    clients = [oai or openai_client(config, slot) for slot in slots]
    try:
        names = [await resolve_model(client, slot.model) for client, slot in zip(clients, slots, strict=True)]
        models = [_Model(label, name, client) for label, name, client in zip(model_labels(names), names, clients, strict=True)]
        async with AsyncControllerClient(config.controller, max_connections=max(2 * config.concurrency, 16)) as controller:
            evaluator = _Evaluator(config, controller)
            indices = {task: await evaluator.indices(task) for task in config.tasks}
            done = store.begin([(m.label, m.name) for m in models], indices) if store is not None else {}
            episodes = await _run_all(evaluator, models, indices, config, done, store)
    finally:
        if store is not None:
            store.close()
        if oai is None:
            for client in clients:
                await client.close()
    labels = [m.label for m in models]
    resumed = sum(1 for ep in done.values() if ep.scored)
    return EvalResult(labels[0], config, episodes, time.monotonic() - started, models=labels, resumed=resumed)


def plan(models: list[str], indices: dict[str, list[SampleIndex]], runs: int) -> list[EpisodeKey]:
    """Every episode of a run, in the order they are played: run by run, task by task, sample by
    sample, the models of one sample next to each other."""
    return [(m, task, i, r) for r in range(runs) for task, idx in indices.items() for i in idx for m in models]


async def _run_all(
    evaluator: _Evaluator,
    models: list[_Model],
    indices: dict[str, list[SampleIndex]],
    config: EvalConfig,
    done: dict[EpisodeKey, EpisodeResult],
    store: RunStore | None,
) -> list[EpisodeResult]:
    by_label = {m.label: m for m in models}
    keys = plan(list(by_label), indices, config.runs)
    finished: dict[EpisodeKey, EpisodeResult] = {k: done[k] for k in keys if k in done and done[k].scored}
    queue = [k for k in keys if k not in finished]

    def bar_of(key: EpisodeKey) -> str:
        return f"{key[0]}/{key[1]}" if len(models) > 1 else key[1]

    totals: dict[str, int] = {}
    for key in keys:
        totals[bar_of(key)] = totals.get(bar_of(key), 0) + 1
    solved = dict.fromkeys(totals, 0)
    initial = dict.fromkeys(totals, 0)
    for key, ep in finished.items():
        initial[bar_of(key)] += 1
        solved[bar_of(key)] += ep.success
    bars = {
        name: tqdm(
            total=total, initial=initial[name], desc=name, position=pos, leave=True, disable=not config.progress, unit="ep"
        )
        for pos, (name, total) in enumerate(totals.items())
    }
    for name, bar in bars.items():
        bar.set_postfix(solved=solved[name], refresh=False)
    pending = iter(queue)

    async def worker() -> None:
        for key in pending:  # one iterator shared by every worker: each key is taken once
            label, task, index, run = key
            ep = await evaluator.episode(by_label[label], task, index, run)
            finished[key] = ep
            if store is not None:
                store.record(ep)
            name = bar_of(key)
            solved[name] += ep.success
            bars[name].update(1)
            bars[name].set_postfix(solved=solved[name], refresh=False)

    workers = [asyncio.create_task(worker()) for _ in range(min(config.concurrency, len(queue)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for bar in bars.values():
            bar.close()
    return [finished[k] for k in sorted(keys, key=_sort_key(list(by_label), list(indices), indices))]


def _sort_key(
    models: list[str], tasks: list[str], indices: dict[str, list[SampleIndex]]
) -> Callable[[EpisodeKey], tuple[int, int, int, int]]:
    m, t = {name: i for i, name in enumerate(models)}, {name: i for i, name in enumerate(tasks)}
    position = {(task, index): i for task, idx in indices.items() for i, index in enumerate(idx)}
    return lambda key: (m[key[0]], t[key[1]], position[(key[1], key[2])], key[3])
