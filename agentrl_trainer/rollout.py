"""One multi-turn episode through the controller, token in / token out.

The loop itself is the SDK's one agent loop (:func:`agentrl_envs.agent.run_episode`); what the
trainer adds is a policy, :class:`TokenPolicy`: per turn it renders the held tokens plus the
template's tail (``trajectory.py``), samples from an engine chosen per turn (so lagging and
current engines can share one trajectory), records ids and logprobs, and parses the tool calls.

Sampling is seeded per turn: with ``RolloutSettings.seed`` set, turn ``t`` of episode ``e`` is
drawn with the generator :func:`turn_seed` derives from (seed, e, t), so a run is replayable
given the same weights and schedule, and runs that share a seed (the ablation's conditions)
share their sampling seeds turn by turn.

Who is at fault decides what happens to a failure (see ``agentrl_envs.errors``): the model's
mistakes (invalid tool call, turn limit, context limit) are scored; anything the infrastructure
did (controller or worker unreachable, ``task error``, ``cancelled``, a session lost to a
controller restart: ``410 session_lost``) marks the episode ``infra_failure``: the pipeline
replays it (``run_episode_retrying``, ``RolloutSettings.infra_retries``) and, if it still fails,
drops it from its group instead of scoring it 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from agentrl_envs import agent
from agentrl_envs.chat.toolcalls import parse_completion
from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import ContextLimitError
from agentrl_envs.protocol.agentrl import SampleIndex, SampleStatus
from agentrl_envs.protocol.openai import Message, ToolDefinition

from .trajectory import TokenTrajectory

__all__ = [
    "TEXT_ANSWER_TASKS",
    "EngineChoice",
    "TurnSample",
    "Episode",
    "EpisodeSpec",
    "RolloutEngine",
    "RolloutSettings",
    "TokenPolicy",
    "run_episode",
    "run_episode_retrying",
    "turn_seed",
]


def turn_seed(run_seed: int, episode_id: int, turn: int, attempt: int = 1, purpose: str = "sample") -> int:
    """A 63-bit seed for one turn of one episode, the same in every run with ``run_seed``.

    ``attempt`` > 1 (a replay after an infrastructure failure) draws afresh, so a failure that the
    sampled text itself caused is not replayed verbatim; ``purpose`` keeps independent draws
    (the sampled tokens, the engine choice) from sharing a stream.
    """
    key = f"{purpose}:{run_seed}:{episode_id}:{turn}" + (f":{attempt}" if attempt > 1 else "")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


class TurnSample(NamedTuple):
    """One sampled turn, as an engine returns it.

    ``logprobs`` are the behaviour policy's: each token's log-probability under the distribution it
    was drawn from (under the tool-call grammar, the model's softmax renormalized over the tokens
    the grammar allowed; ``allowed`` holds those tokens, packed by
    :func:`agentrl_envs.chat.decode.pack_token_mask`, ``None`` where all were allowed).
    ``free_logprobs``: under the model's own, unconstrained softmax (a diagnostic; ``None``: the
    same as ``logprobs``). ``version``: the weights version that sampled the turn, read when it
    was sampled (a weight load right after cannot relabel it).
    """

    ids: list[int]
    logprobs: list[float]
    version: int
    allowed: list[Any] | None = None
    free_logprobs: list[float] | None = None


async def run_episode_retrying(
    client: AsyncControllerClient,
    spec: EpisodeSpec,
    pick_engine: Callable[[int], EngineChoice],
    tokenizer: Any,
    stop_token_ids: list[int],
    settings: RolloutSettings,
) -> Episode:
    """:func:`run_episode`, replayed from the start up to ``settings.infra_retries`` times while it
    ends as an infrastructure failure (a worker killed, a controller restarted: ``session_lost``),
    as eval retries a sample; the last attempt is returned (``attempts`` counts them). A replay
    samples afresh (its own turn seeds): nothing of a lost attempt is trained on."""
    for attempt in range(1, settings.infra_retries + 2):
        ep = await run_episode(client, spec, pick_engine, tokenizer, stop_token_ids, settings, attempt=attempt)
        ep.attempts = attempt
        if not ep.infra_failure:
            break
    return ep


class RolloutEngine(Protocol):
    """What the rollout needs from an inference engine (transformers, vLLM, simulated)."""

    version: int  # the optimizer step whose weights it holds

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
        """Sample a turn; with ``tools``, under their tool-call grammar: exactly one well-formed
        call (``call_required``), or text in which any call opened is well-formed (``auto``);
        ``close_in_budget``: a call still open when the tokens left just suffice is completed.
        ``call_required`` and ``close_in_budget`` are only passed along with ``tools``.
        ``seed``: the turn's generator (``None``: random); the same seed, prompt and weights give
        the same tokens."""
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


#: Tasks whose episodes end with a text answer rather than a tool call (AgentBench's KG ends with
#: ``Final Answer: #k``): under the grammar their turns are sampled in ``auto`` mode.
TEXT_ANSWER_TASKS: tuple[str, ...] = ("kg",)


@dataclass(frozen=True)
class RolloutSettings:
    max_tokens: int = 256  # per assistant turn
    max_turns: int = 50  # a safety cap; the task's own round limit normally ends the episode
    max_context: int = 8192  # prompt + completion tokens
    temperature: float = 1.0
    top_p: float = 1.0
    assistant_prefix: str = ""
    constrain_tool_calls: bool = False  # sample every turn under the tool-call grammar
    # under the grammar: complete a call still open when the turn's tokens are nearly spent
    close_calls_in_budget: bool = False
    # under the grammar, these tasks' turns may be text (any call still well-formed): their
    # episodes end with a text answer, which the "required" grammar could never produce
    text_answer_tasks: tuple[str, ...] = TEXT_ANSWER_TASKS
    start_timeout: float = 120.0  # how long to wait for a free worker slot
    infra_retries: int = 2  # replays of an episode lost to the infrastructure before it is dropped
    seed: int | None = None  # the run's sampling seed (turn_seed); None: every turn seeds itself at random


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
    attempts: int = 1  # plays of this episode; all but the last were lost to the infrastructure

    @property
    def completed(self) -> bool:
        return self.status == SampleStatus.COMPLETED.value

    @property
    def turns(self) -> int:
        return len(self.trajectory.turns) if self.trajectory else 0


class TokenPolicy:
    """The trainer's engines as a policy of the agent loop; ``trajectory`` holds what they sampled.

    ``pick_engine(turn)`` returns the engine for that turn. A prompt with no room left for one
    token raises :class:`ContextLimitError` (``agent context limit``, scored); an engine's own
    failure propagates. Under the grammar (``settings.constrain_tool_calls``) every turn is one
    call, except for a ``task`` in ``settings.text_answer_tasks``: its turns may be text.
    """

    def __init__(
        self,
        pick_engine: Callable[[int], EngineChoice],
        tokenizer: Any,
        stop_token_ids: list[int],
        settings: RolloutSettings,
        task: str | None = None,
        *,
        episode_id: int = 0,
        attempt: int = 1,
    ) -> None:
        self.pick_engine = pick_engine
        self.episode_id = episode_id
        self.attempt = attempt
        self.tokenizer = tokenizer
        self.stop_token_ids = stop_token_ids
        self.settings = settings
        self.call_required = task not in settings.text_answer_tasks
        self.trajectory: TokenTrajectory | None = None
        self._tools: list[ToolDefinition] = []

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        s = self.settings
        if self.trajectory is None:
            self._tools = [ToolDefinition.model_validate(t) for t in tools]
            self.trajectory = TokenTrajectory(self.tokenizer, self._tools, self.stop_token_ids, s.assistant_prefix)
        elif [t["function"]["name"] for t in tools] != [t.function.name for t in self._tools]:
            # A token trajectory is one prompt that only grows; the tools are rendered at its head.
            # A task whose tools change within an episode (bfcl's multi_turn_miss_func) would need
            # the prompt rendered afresh, which no longer extends the trained tokens.
            raise ValueError(
                "the session's tools changed within the episode (e.g. bfcl's multi_turn_miss_func): "
                "token-in/token-out rollouts keep one tool list per episode; evaluate such tasks with agentrl-envs eval"
            )
        traj = self.trajectory
        history = [Message.model_validate(m) for m in messages]
        prompt = traj.next_prompt(history)
        room = s.max_context - len(prompt)
        if room < 1:
            raise ContextLimitError(f"the prompt has {len(prompt)} tokens, the context {s.max_context}")
        turn = len(traj.turns)
        choice = self.pick_engine(turn)
        seed = None if s.seed is None else turn_seed(s.seed, self.episode_id, turn, self.attempt)
        if s.constrain_tool_calls:
            out = await choice.engine.generate(
                prompt,
                min(s.max_tokens, room),
                s.temperature,
                s.top_p,
                tools=self._tools,
                call_required=self.call_required,
                close_in_budget=s.close_calls_in_budget,
                seed=seed,
            )
        else:
            out = await choice.engine.generate(prompt, min(s.max_tokens, room), s.temperature, s.top_p, seed=seed)
        assistant = parse_completion(traj.completion_text(out.ids), [t.function.name for t in self._tools]).to_message()
        traj.add_completion(
            out.ids,
            out.logprobs,
            n_messages=len(history) + 1,
            engine=choice.engine_id,
            version=out.version,
            lagging=choice.lagging,
            allowed=out.allowed,
            free_logprobs=out.free_logprobs,
        )
        return assistant.model_dump(mode="json", exclude_none=True)


async def run_episode(
    client: AsyncControllerClient,
    spec: EpisodeSpec,
    pick_engine: Callable[[int], EngineChoice],
    tokenizer: Any,
    stop_token_ids: list[int],
    settings: RolloutSettings,
    *,
    attempt: int = 1,
) -> Episode:
    """Play one episode with a :class:`TokenPolicy`; never raises for environment or
    infrastructure failures (controller, worker and network errors end the episode as an
    infrastructure failure); anything else (a bug, an engine that failed) propagates.
    ``attempt``: which play of ``spec`` this is (its turns' seeds, :func:`turn_seed`)."""
    policy = TokenPolicy(
        pick_engine, tokenizer, stop_token_ids, settings, task=spec.task, episode_id=spec.episode_id, attempt=attempt
    )
    t = await agent.run_episode(
        client, spec.task, spec.index, policy, stops=[agent.MaxTurns(settings.max_turns)], start_timeout=settings.start_timeout
    )
    infra = t.outcome is agent.Outcome.INFRA_FAILURE
    return Episode(
        spec,
        t.status.value,
        t.reward,
        infra,
        policy.trajectory,
        error=t.error if infra else None,
        seconds=t.seconds,
        metrics=t.metrics,
    )
