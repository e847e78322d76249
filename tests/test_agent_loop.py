"""The one agent loop (agentrl_envs.agent): policies, stops, outcomes, per-session limits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tasks_for_tests import Calc

from agentrl_envs import TaskRuntime
from agentrl_envs.agent import AgentSession, InProcessSessions, MaxTurns, Outcome, classify, run_episode
from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import ContextLimitError, DataError, ModelServerError
from agentrl_envs.policy import ScriptedPolicy, as_policy, call_turn, last_tool_output
from agentrl_envs.protocol.agentrl import SampleStatus


@pytest.fixture
async def runtime():
    rt = TaskRuntime(Calc, split="dev")
    await rt.open()
    Calc.teardowns.clear()
    yield rt
    await rt.close()


class ReadsTheSum:
    """Asks the add tool, then answers what it said: a policy that needs the observation."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        assert {t["function"]["name"] for t in tools} >= {"add", "answer"}
        output = last_tool_output(messages)
        self.seen.append(output)
        if output is None:
            question = messages[-1]["content"]  # "What is A + B?"
            a, b = (int(x) for x in question.removeprefix("What is ").removesuffix("?").split(" + "))
            return call_turn("add", {"x": a, "y": b})
        return call_turn("answer", {"value": int(output)})


class Slow(ReadsTheSum):
    """:class:`ReadsTheSum` that thinks ``seconds`` before each turn (a busy model)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(self.seconds)
        return await super().act(messages, tools)


class Forever:
    async def act(self, messages, tools):
        return {"role": "assistant", "content": "thinking"}


class Raises:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def act(self, messages, tools):
        raise self.exc


@pytest.mark.parametrize(
    ("status", "reward", "outcome"),
    [
        (SampleStatus.COMPLETED, 1.0, Outcome.SOLVED),
        (SampleStatus.COMPLETED, 0.5, Outcome.FAILED),
        (SampleStatus.AGENT_CONTEXT_LIMIT, 0.0, Outcome.FAILED),
        (SampleStatus.AGENT_INVALID_ACTION, 0.0, Outcome.FAILED),
        (SampleStatus.TASK_LIMIT_REACHED, 0.0, Outcome.TASK_LIMIT),
        (SampleStatus.TASK_ERROR, 0.0, Outcome.INFRA_FAILURE),
        (SampleStatus.CANCELLED, 0.0, Outcome.INFRA_FAILURE),
        (SampleStatus.UNKNOWN, 0.0, Outcome.INFRA_FAILURE),
    ],
)
def test_classify(status, reward, outcome):
    assert classify(status, reward) is outcome
    assert outcome.scored is (outcome is not Outcome.INFRA_FAILURE)


async def test_a_policy_that_reads_observations_solves(runtime):
    policy = ReadsTheSum()
    t = await run_episode(InProcessSessions(runtime), "calc", 1, policy)
    assert (t.outcome, t.status, t.reward, t.turns) == (Outcome.SOLVED, SampleStatus.COMPLETED, 1.0, 2)
    assert policy.seen == [None, "6"]  # 10 + -4, read from the add tool's reply
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert t.session_id is None and len(Calc.teardowns) == 1


async def test_a_scripted_policy_that_runs_out_fails_and_the_session_is_cancelled(runtime):
    sessions = InProcessSessions(runtime)
    t = await run_episode(sessions, "calc", 0, ScriptedPolicy([{"name": "add", "arguments": {"x": 1}}]))
    assert t.outcome is Outcome.FAILED and t.turns == 1
    assert t.metrics["stopped_by_client"] == "cancelled" and "policy stopped" in (t.error or "")
    assert len(Calc.teardowns) == 1 and not sessions._episodes


async def test_client_side_max_turns_truncates(runtime):
    sessions = InProcessSessions(runtime)
    t = await run_episode(sessions, "calc", 0, Forever(), stops=[MaxTurns(3)])
    assert (t.outcome, t.status, t.turns) == (Outcome.TASK_LIMIT, SampleStatus.TASK_LIMIT_REACHED, 3)
    assert t.metrics["stopped_by_client"] == "task limit reached"
    assert len(Calc.teardowns) == 1 and not sessions._episodes


async def test_the_task_limit_is_read_per_session_from_the_sample(runtime):
    runtime.samples.append({"a": 1, "b": 1, "max_turns": 2})
    t = await run_episode(InProcessSessions(runtime), "calc", 2, Forever(), stops=[MaxTurns(50)])
    assert (t.outcome, t.status, t.turns) == (Outcome.TASK_LIMIT, SampleStatus.TASK_LIMIT_REACHED, 2)
    assert "stopped_by_client" not in t.metrics  # the task ended it, not the client
    t = await run_episode(InProcessSessions(runtime), "calc", 0, Forever(), stops=[MaxTurns(50)])
    assert t.turns == Calc.max_turns == 8
    assert type(runtime.episode(2).task) is Calc  # no run-time subclass


def test_turn_limit_precedence_and_validation():
    class Cfg:
        max_turns = 4

    assert Calc.resolve_turn_limit({"max_turns": 2}, Cfg()) == 4  # the operator's option wins
    assert Calc.resolve_turn_limit({"max_turns": 2}, Calc.Config()) == 2
    assert Calc.resolve_turn_limit({}, Calc.Config()) == 8
    for bad in (0, -1, "3", 2.5, True):
        with pytest.raises(DataError, match="max_turns must be a positive integer"):
            Calc.resolve_turn_limit({"max_turns": bad}, Calc.Config())


async def test_context_limit_is_the_models_failure(runtime):
    sessions = InProcessSessions(runtime)
    t = await run_episode(sessions, "calc", 0, Raises(ContextLimitError("prompt of 9000 tokens")))
    assert (t.outcome, t.status, t.reward) == (Outcome.FAILED, SampleStatus.AGENT_CONTEXT_LIMIT, 0.0)
    assert "9000" in (t.error or "") and len(Calc.teardowns) == 1 and not sessions._episodes


async def test_a_model_server_failure_is_infrastructure(runtime):
    t = await run_episode(InProcessSessions(runtime), "calc", 0, Raises(ModelServerError("503 from the model")))
    assert t.outcome is Outcome.INFRA_FAILURE and not t.outcome.scored
    assert "ModelServerError: 503 from the model" == t.error and len(Calc.teardowns) == 1


async def test_a_task_error_is_infrastructure(runtime):
    t = await run_episode(InProcessSessions(runtime), "calc", 0, ScriptedPolicy([{"name": "explode"}]))
    assert (t.outcome, t.status) == (Outcome.INFRA_FAILURE, SampleStatus.TASK_ERROR)
    assert t.error is not None and "boom" in t.error


async def test_a_policy_bug_propagates_after_the_session_is_cancelled(runtime):
    sessions = InProcessSessions(runtime)
    with pytest.raises(ZeroDivisionError):
        await run_episode(sessions, "calc", 0, Raises(ZeroDivisionError()))
    assert len(Calc.teardowns) == 1 and not sessions._episodes


async def test_an_unknown_sample_is_an_infrastructure_failure_with_the_reason(runtime):
    t = await run_episode(InProcessSessions(runtime), "calc", 99, ScriptedPolicy([]))
    assert t.outcome is Outcome.INFRA_FAILURE and "UnknownSampleError" in (t.error or "")


def test_as_policy():
    assert isinstance(as_policy([{"name": "add"}]), ScriptedPolicy)
    policy = ReadsTheSum()
    assert as_policy(policy) is policy
    with pytest.raises(TypeError, match="Policy or a list of calls"):
        as_policy("add")


async def test_a_failed_interact_is_infrastructure_and_the_session_is_cancelled(runtime):
    from agentrl_envs.errors import WorkerUnreachableError

    class Flaky(InProcessSessions):
        cancelled: list[int] = []

        async def interact(self, session_id, messages):
            raise WorkerUnreachableError("connection reset")

        async def cancel_quietly(self, session_id):
            self.cancelled.append(session_id)
            await super().cancel_quietly(session_id)

    sessions = Flaky(runtime)
    t = await run_episode(sessions, "calc", 0, ReadsTheSum())
    assert (t.outcome, t.status, t.turns) == (Outcome.INFRA_FAILURE, SampleStatus.UNKNOWN, 1)
    assert "connection reset" in (t.error or "") and sessions.cancelled == [1] and len(Calc.teardowns) == 1


async def test_a_policy_thinking_past_the_idle_timeouts_keeps_its_session_by_renewing_it(make_stack):
    """The controller and the worker cancel a session idle for 1 s; the policy thinks 1.6 s a turn.
    Renewed every 0.3 s meanwhile (as agentrl-eval does), the episode is solved and the renewals
    are not turns; not renewed, it is cancelled as idle (an infrastructure failure)."""
    stack = make_stack(idle_timeout=1.0)
    stack.add_worker(Calc, idle_timeout=1.0)
    async with AsyncControllerClient(stack.url) as client:
        t = await run_episode(client, "calc", 1, Slow(1.6), renew_every=0.3)
        assert (t.outcome, t.reward, t.turns) == (Outcome.SOLVED, 1.0, 2)
        assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool"]
        assert t.metrics["turns"] == 2  # the worker counted the steps only
        t = await run_episode(client, "calc", 1, Slow(1.6), renew_every=None)
        # whichever idle clock fires first: the controller's ("idle for ...") or the worker's
        assert t.outcome is Outcome.INFRA_FAILURE and ("idle" in (t.error or "") or "expired" in (t.error or "")), t.error


async def test_renewals_stop_with_the_turn_and_in_process_sessions_answer_them(runtime):
    class Counting(InProcessSessions):
        renewals = 0

        async def interact(self, session_id, messages):
            Counting.renewals += messages == [{"role": "assistant", "content": ""}]
            return await super().interact(session_id, messages)

    sessions = Counting(runtime)
    t = await run_episode(sessions, "calc", 1, Slow(0.25), renew_every=0.05)
    assert (t.outcome, t.turns, t.metrics["turns"]) == (Outcome.SOLVED, 2, 2)
    assert Counting.renewals >= 4  # several per turn, none of them a step
    after = Counting.renewals
    await asyncio.sleep(0.2)
    assert Counting.renewals == after  # no renewal outlives its turn
    with pytest.raises(ValueError, match="renew_every must be positive"):
        AgentSession(sessions, "calc", 1, renew_every=0)
