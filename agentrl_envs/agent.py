"""The agent loop, written once: start a sample, ask a policy, interact, stop, classify.

Everyone who plays episodes calls this module: ``agentrl-envs eval`` (a model over the OpenAI
API), ``agentrl-envs check`` (a task's reference policy), the gymnasium env (the user's
actions, one :meth:`AgentSession.act` per ``step``) and the trainer's rollout (its token
engines, through a policy that records what it sampled)::

    transcript = await run_episode(client, "db", 3, policy, stops=[MaxTurns(15)])
    transcript.outcome   # Outcome.SOLVED / FAILED / TASK_LIMIT / INFRA_FAILURE

Sessions live behind a :class:`Sessions` transport: :class:`~agentrl_envs.client.AsyncControllerClient`
(the controller and its workers) or :class:`InProcessSessions` (a :class:`TaskRuntime` in this
process, the same code a worker runs).

Who is at fault decides the outcome (see :mod:`agentrl_envs.errors`):

* the task ended the episode → ``SOLVED`` if ``completed`` with reward ≥ 1, ``TASK_LIMIT`` if
  its round limit ended it, else ``FAILED``;
* a client-side stop (:class:`MaxTurns`) → ``task limit reached``, ``TASK_LIMIT``;
* the policy's prompt no longer fits (:class:`~agentrl_envs.errors.ContextLimitError`) →
  ``agent context limit``, ``FAILED``; the policy returned ``None`` → ``FAILED``;
* the episode ended ``task error`` / ``cancelled``, or the controller, worker, network or model
  server failed → ``INFRA_FAILURE``: retry it or drop it, never score it.

Anything else a policy raises (a bug) propagates, after the session is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx

from .errors import AgentRLEnvsError, ContextLimitError, ModelError, UnknownSessionError
from .protocol.agentrl import (
    InteractResponse,
    SampleIndex,
    SampleStatus,
    StartSampleResponse,
    interact_response,
    is_renewal,
    renewal,
    start_response,
)
from .protocol.openai import Message

if TYPE_CHECKING:
    from .episode import Episode, TaskRuntime
    from .policy import Policy

__all__ = [
    "AgentSession",
    "InProcessSessions",
    "MaxTurns",
    "Outcome",
    "Sessions",
    "Stop",
    "Transcript",
    "classify",
    "run_episode",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between renewals of a session while the policy takes its turn (agentrl-eval renews
#: every 180 s while its model thinks): a session waiting on a busy model is not cancelled by the
#: controller's or the worker's idle timeout (300 s by default). Measured: a five-task held-out
#: evaluation sharing its 2 cores with one more process lost 20 sessions to it in 9 minutes.
RENEW_EVERY = 180.0


class Outcome(str, Enum):
    """How an episode ended, as the one who scores it sees it."""

    SOLVED = "solved"
    FAILED = "failed"
    TASK_LIMIT = "task limit"
    INFRA_FAILURE = "infrastructure failure"

    @property
    def scored(self) -> bool:
        return self is not Outcome.INFRA_FAILURE


def classify(status: SampleStatus, reward: float) -> Outcome:
    """The outcome of an episode that ended with ``status`` and ``reward``."""
    if status.is_infrastructure_failure or status in (SampleStatus.RUNNING, SampleStatus.UNKNOWN):
        return Outcome.INFRA_FAILURE
    if status == SampleStatus.TASK_LIMIT_REACHED:
        return Outcome.TASK_LIMIT
    if status == SampleStatus.COMPLETED and reward >= 1.0:
        return Outcome.SOLVED
    return Outcome.FAILED


@dataclass
class Transcript:
    """One episode as the client saw it; ``outcome`` is set once it has ended."""

    task: str
    index: SampleIndex
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    status: SampleStatus = SampleStatus.RUNNING
    reward: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    outcome: Outcome | None = None
    error: str | None = None
    seconds: float = 0.0
    session_id: int | None = None

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    @property
    def solved(self) -> bool:
        return self.outcome is Outcome.SOLVED


# --------------------------------------------------------------------------- stop conditions

#: A client-side stop: given the transcript before the next turn, the status to end it with, or None.
Stop = Callable[[Transcript], "SampleStatus | None"]


@dataclass(frozen=True)
class MaxTurns:
    """End the episode ``task limit reached`` once ``n`` assistant turns were played."""

    n: int

    def __call__(self, transcript: Transcript) -> SampleStatus | None:
        return SampleStatus.TASK_LIMIT_REACHED if transcript.turns >= self.n else None


# --------------------------------------------------------------------------- transports


class Sessions(Protocol):
    """Where sessions live: the controller (:class:`~agentrl_envs.client.AsyncControllerClient`)
    or this process (:class:`InProcessSessions`)."""

    async def start_sample_when_free(
        self, task: str, index: SampleIndex, *, timeout: float, delay: Callable[[int], float]
    ) -> tuple[int, StartSampleResponse]: ...

    async def interact(self, session_id: int, messages: list[dict[str, Any]]) -> InteractResponse: ...

    async def cancel_quietly(self, session_id: int) -> None: ...


class InProcessSessions:
    """Sessions of one :class:`TaskRuntime` run in this process (no controller, no worker)."""

    def __init__(self, runtime: TaskRuntime) -> None:
        self.runtime = runtime
        self._episodes: dict[int, Episode] = {}
        self._ids = iter(range(1, 2**62))

    async def start_sample_when_free(
        self, task: str, index: SampleIndex, *, timeout: float = 0.0, delay: Callable[[int], float] | None = None
    ) -> tuple[int, StartSampleResponse]:
        if task != self.runtime.name:
            raise AgentRLEnvsError(f"this runtime serves task {self.runtime.name!r}, not {task!r}")
        episode = self.runtime.episode(index)
        out = await episode.start()
        session_id = next(self._ids)
        if not out.finish:
            self._episodes[session_id] = episode
        first = start_response(out)
        return session_id, first

    async def interact(self, session_id: int, messages: list[dict[str, Any]]) -> InteractResponse:
        episode = self._episodes.get(session_id)
        if episode is None:
            raise UnknownSessionError(f"no session {session_id}")
        if is_renewal(messages):  # not a step (no idle clock here): answered as a worker answers it
            return interact_response(episode.output(messages))
        out = await episode.step(messages)
        if out.finish:
            del self._episodes[session_id]
        return interact_response(out)

    async def cancel_quietly(self, session_id: int) -> None:
        episode = self._episodes.pop(session_id, None)
        if episode is not None:
            await episode.close()

    async def aclose(self) -> None:
        """Cancel every open session."""
        for session_id in list(self._episodes):
            await self.cancel_quietly(session_id)


# --------------------------------------------------------------------------- the loop

#: Failures nobody can blame the model for: the transport, the controller, a worker, a model server.
_INFRA = (httpx.HTTPError, OSError)


def _start_delay(attempt: int) -> float:
    """Seconds to wait before start retry ``attempt`` while every worker is full: 0.05 s doubling, at most 1 s."""
    return min(0.05 * 2**attempt, 1.0)


class AgentSession:
    """One episode seen from the client: :meth:`start`, then :meth:`act` per assistant message.

    ``stops`` are checked after every turn; the first that fires ends the episode client-side.
    Infrastructure failures do not raise: they end the transcript as ``INFRA_FAILURE``.
    ``renew_every``: seconds between renewals of the session during :meth:`renewing` (None: none).
    """

    def __init__(
        self,
        sessions: Sessions,
        task: str,
        index: SampleIndex,
        *,
        stops: Sequence[Stop] = (),
        start_timeout: float = 0.0,
        start_delay: Callable[[int], float] = _start_delay,
        renew_every: float | None = None,
    ) -> None:
        if renew_every is not None and renew_every <= 0:
            raise ValueError(f"renew_every must be positive seconds or None, not {renew_every}")
        self.sessions = sessions
        self.renew_every = renew_every
        self.stops = list(stops)
        self.start_timeout = start_timeout
        self.start_delay = start_delay
        self.transcript = Transcript(task, index)
        #: The exception that ended the episode as an infrastructure failure, if one did.
        self.failure: BaseException | None = None
        self._started = time.monotonic()

    @property
    def done(self) -> bool:
        return self.transcript.finished

    async def start(self) -> Transcript:
        t = self.transcript
        try:
            t.session_id, first = await self.sessions.start_sample_when_free(
                t.task, t.index, timeout=self.start_timeout, delay=self.start_delay
            )
        except (AgentRLEnvsError, *_INFRA) as e:
            return self._infra(e)
        t.messages, t.tools = list(first.messages), list(first.tools)
        self._update(first.finish, first.status, first.reward, first.metrics)
        await self._apply_stops()
        return t

    async def act(self, message: dict[str, Any] | Message) -> list[dict[str, Any]]:
        """Send one assistant message; return the new messages (empty once the session failed)."""
        t = self.transcript
        if t.finished or t.session_id is None:
            raise RuntimeError("the episode has ended (or never started)")
        if isinstance(message, Message):
            message = message.model_dump(mode="json", exclude_none=True)
        if message.get("content") == "" and not message.get("tool_calls"):
            # An empty reply is sent as content null: content "" with no tool call is how
            # agentrl-eval renews a session, and the controller would take it for a renewal.
            message = {**message, "content": None}
        t.messages.append(message)
        t.turns += 1
        try:
            out = await self.sessions.interact(t.session_id, [message])
        except (AgentRLEnvsError, *_INFRA) as e:
            await self.fail(e)
            return []
        t.messages.extend(out.messages)
        if out.tools is not None:  # the step changed the session's tools
            t.tools = list(out.tools)
        self._update(out.finish, out.status, out.reward, out.metrics)
        await self._apply_stops()
        return list(out.messages)

    async def renewing(self, turn: Awaitable[T]) -> T:
        """Await ``turn`` (the policy thinking), renewing the session every ``renew_every``
        seconds meanwhile. A renewal that fails ends the renewals, not the episode: the next step
        reports what happened to the session."""
        if self.renew_every is None or self.transcript.session_id is None:
            return await turn
        session_id, every, thinking = self.transcript.session_id, self.renew_every, asyncio.Event()

        async def renew() -> None:
            while True:
                try:
                    await asyncio.wait_for(thinking.wait(), every)
                    return
                except TimeoutError:
                    pass
                try:
                    await self.sessions.interact(session_id, [renewal()])
                except (AgentRLEnvsError, *_INFRA) as e:
                    log.debug("renewing session %s failed: %s", session_id, e)
                    return

        renewer = asyncio.create_task(renew())
        try:
            result = await turn
        except BaseException:
            renewer.cancel()
            raise
        thinking.set()
        await renewer  # a renewal in flight ends before the step goes out
        return result

    async def stop(self, status: SampleStatus, *, error: str | None = None, outcome: Outcome | None = None) -> Transcript:
        """End the episode client-side with ``status`` (the session is cancelled)."""
        t = self.transcript
        if not t.finished:
            await self._cancel()
            t.status, t.reward, t.error = status, 0.0, error
            t.metrics["stopped_by_client"] = status.value
            self._finish(outcome or classify(status, 0.0))
        return t

    async def fail(self, exc: BaseException) -> Transcript:
        """End the episode as an infrastructure failure caused by ``exc`` (the session is cancelled)."""
        if not self.transcript.finished:
            await self._cancel()
            self._infra(exc)
        return self.transcript

    async def close(self) -> None:
        """Cancel the session if it is still running (idempotent); the transcript stays as it is."""
        if not self.transcript.finished:
            await self.stop(SampleStatus.CANCELLED, error="closed by the client")

    # ------------------------------------------------------------------ internals

    def _update(self, finish: bool, status: SampleStatus, reward: float, metrics: dict[str, Any]) -> None:
        t = self.transcript
        t.status, t.reward, t.metrics = status, float(reward), dict(metrics)
        if finish:
            t.session_id = None  # the worker closed it
            if status.is_infrastructure_failure:
                why = metrics.get("error")
                t.error = f"episode ended with status {status.value!r}" + (f": {why}" if why else "")
            self._finish(classify(status, reward))

    async def _apply_stops(self) -> None:
        for stop in self.stops:
            if self.transcript.finished:
                return
            status = stop(self.transcript)
            if status is not None:
                await self.stop(status)

    async def _cancel(self) -> None:
        t = self.transcript
        if t.session_id is not None:
            session_id, t.session_id = t.session_id, None
            await self.sessions.cancel_quietly(session_id)

    def _infra(self, exc: BaseException) -> Transcript:
        t = self.transcript
        log.warning("%s #%s: infrastructure failure: %s: %s", t.task, t.index, type(exc).__name__, exc)
        self.failure = exc
        t.status = t.status if t.status != SampleStatus.RUNNING else SampleStatus.UNKNOWN
        t.error = f"{type(exc).__name__}: {exc}"
        self._finish(Outcome.INFRA_FAILURE)
        return t

    def _finish(self, outcome: Outcome) -> None:
        t = self.transcript
        t.outcome = outcome
        t.seconds = time.monotonic() - self._started


async def run_episode(
    sessions: Sessions,
    task: str,
    index: SampleIndex,
    policy: Policy,
    *,
    stops: Sequence[Stop] = (),
    start_timeout: float = 0.0,
    start_delay: Callable[[int], float] = _start_delay,
    renew_every: float | None = RENEW_EVERY,
) -> Transcript:
    """Play one episode of ``task`` sample ``index`` with ``policy``; see the module docstring.

    ``start_timeout``: how long to keep retrying the start while every worker is full
    (``start_delay(n)`` seconds before retry ``n``). ``renew_every``: while the policy takes a
    turn, the session is renewed this often (:data:`RENEW_EVERY`; None: never), so a slow model
    is not taken for an abandoned client. Never raises for environment or infrastructure
    failures; a policy's own bug propagates after the session is cancelled.
    """
    session = AgentSession(
        sessions, task, index, stops=stops, start_timeout=start_timeout, start_delay=start_delay, renew_every=renew_every
    )
    t = session.transcript
    try:
        await session.start()
        while not session.done:
            try:
                message = await session.renewing(policy.act(t.messages, t.tools))
            except ContextLimitError as e:
                await session.stop(SampleStatus.AGENT_CONTEXT_LIMIT, error=e.message, outcome=Outcome.FAILED)
                break
            except ModelError:
                raise
            except (AgentRLEnvsError, *_INFRA) as e:  # the policy's model server, say
                await session.fail(e)
                break
            if message is None:
                await session.stop(
                    SampleStatus.CANCELLED, error="the policy stopped before the episode ended", outcome=Outcome.FAILED
                )
                break
            await session.act(message)
    finally:
        if not session.done:  # a policy's bug is propagating: release the session first
            await session._cancel()
    return t
