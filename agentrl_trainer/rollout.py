"""One multi-turn episode through the controller, token in / token out.

``run_episode`` is the multi-turn loop of the trainer, written once: start a session, then per
turn render → sample from an engine (chosen per turn, so lagging and current engines can share
one trajectory) → parse the tool calls → ``interact``, until the environment ends the episode.

Who is at fault decides what happens to a failure (see ``agentrl_envs.errors``): the model's
mistakes (invalid tool call, turn limit, context limit) are scored; anything the infrastructure
did (controller or worker unreachable, ``task error``, ``cancelled``) marks the episode
``infra_failure`` so the pipeline drops it from its group instead of scoring it 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import AgentRLEnvsError
from agentrl_envs.models.toolcalls import parse_completion
from agentrl_envs.schema import Message, SampleIndex, SampleStatus, ToolDefinition

from .trajectory import TokenTrajectory

__all__ = ["EngineChoice", "Episode", "EpisodeSpec", "RolloutEngine", "RolloutSettings", "run_episode"]

log = logging.getLogger(__name__)


class RolloutEngine(Protocol):
    """What the rollout needs from an inference engine (transformers, vLLM, simulated)."""

    version: int  # the optimizer step whose weights it holds

    async def generate(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float, tools: Any = None
    ) -> tuple[list[int], list[float]]:
        """Sample a turn; with ``tools``, constrained to one well-formed call to one of them."""
        ...


@dataclass(frozen=True)
class EngineChoice:
    engine: RolloutEngine
    engine_id: int
    lagging: bool


@dataclass(frozen=True)
class EpisodeSpec:
    task: str
    index: SampleIndex
    group_id: int  # episodes of one GRPO group share it
    episode_id: int


@dataclass(frozen=True)
class RolloutSettings:
    max_tokens: int = 256  # per assistant turn
    max_turns: int = 50  # a safety cap; the task's own round limit normally ends the episode
    max_context: int = 8192  # prompt + completion tokens
    temperature: float = 1.0
    top_p: float = 1.0
    assistant_prefix: str = ""
    constrain_tool_calls: bool = False  # sample every turn under the tool-call grammar
    start_timeout: float = 120.0  # how long to wait for a free worker slot


@dataclass
class Episode:
    """A finished episode: its outcome and its training rows."""

    spec: EpisodeSpec
    status: str
    reward: float
    infra_failure: bool
    trajectory: TokenTrajectory | None
    error: str | None = None
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.status == SampleStatus.COMPLETED.value

    @property
    def turns(self) -> int:
        return len(self.trajectory.turns) if self.trajectory else 0


async def run_episode(
    client: AsyncControllerClient,
    spec: EpisodeSpec,
    pick_engine: Callable[[int], EngineChoice],
    tokenizer: Any,
    stop_token_ids: list[int],
    settings: RolloutSettings,
) -> Episode:
    """Play one episode; never raises for environment or infrastructure failures.

    ``pick_engine(turn)`` returns the engine for that turn. Controller, worker and network
    errors end the episode as an infrastructure failure; anything else (a bug, an engine that
    failed) propagates.
    """
    started = time.monotonic()
    session_id: int | None = None
    traj: TokenTrajectory | None = None
    try:
        session_id, first = await client.start_sample_when_free(
            spec.task, spec.index, timeout=settings.start_timeout, delay=lambda n: min(0.05 * 2**n, 1.0)
        )
        messages = [Message.model_validate(m) for m in first.messages]
        tools = [ToolDefinition.model_validate(t) for t in first.tools]
        tool_names = [t.function.name for t in tools]
        traj = TokenTrajectory(tokenizer, tools, stop_token_ids, settings.assistant_prefix)
        finished, status, reward, metrics = first.finish, first.status, first.reward, dict(first.metrics)
        while not finished:
            if len(traj.turns) >= settings.max_turns:
                status, reward = SampleStatus.TASK_LIMIT_REACHED, 0.0
                break
            prompt = traj.next_prompt(messages)
            room = settings.max_context - len(prompt)
            if room < 1:
                status, reward = SampleStatus.AGENT_CONTEXT_LIMIT, 0.0
                break
            choice = pick_engine(len(traj.turns))
            ids, logprobs = await choice.engine.generate(
                prompt,
                min(settings.max_tokens, room),
                settings.temperature,
                settings.top_p,
                tools=tools if settings.constrain_tool_calls else None,
            )
            assistant = parse_completion(traj.completion_text(ids), tool_names).to_message()
            messages.append(assistant)
            traj.add_completion(
                ids,
                logprobs,
                n_messages=len(messages),
                engine=choice.engine_id,
                version=choice.engine.version,
                lagging=choice.lagging,
            )
            out = await client.interact(session_id, [assistant])
            messages.extend(Message.model_validate(m) for m in out.messages)
            finished, status, reward, metrics = out.finish, out.status, out.reward, dict(out.metrics)
        if finished:
            session_id = None  # the controller closed it
        infra = status.is_infrastructure_failure
        return Episode(
            spec,
            status.value,
            float(reward),
            infra,
            traj,
            error=metrics.get("error") if infra else None,
            seconds=time.monotonic() - started,
            metrics=metrics,
        )
    except (AgentRLEnvsError, httpx.HTTPError, OSError) as e:
        log.warning("%s #%s: infrastructure failure: %s: %s", spec.task, spec.index, type(e).__name__, e)
        return Episode(
            spec,
            SampleStatus.UNKNOWN.value,
            0.0,
            True,
            traj,
            error=f"{type(e).__name__}: {e}",
            seconds=time.monotonic() - started,
        )
    finally:
        if session_id is not None:
            await client.cancel_quietly(session_id)
