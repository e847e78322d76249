"""The in-process ``teardown`` check: ended, cancelled and shut-down sessions each run the task's
``teardown`` once, on a worker service without HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from ..agent import AgentSession, MaxTurns, run_episode
from ..episode import TaskRuntime
from ..errors import UnknownSessionError
from ..policy import as_policy
from ..protocol.agentrl import InteractResponse, SampleStatus, interact_response, start_response
from ..task import Task
from .common import NO_CALL, shorten, split_of, task_label


class _Lifecycle:
    """Wraps ``setup`` and ``teardown`` of a task class to count them per session (instance)."""

    def __init__(self, task_cls: type[Task]) -> None:
        self.task_cls = task_cls
        self.sessions: list[Task] = []
        self.teardowns: dict[int, int] = {}
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> _Lifecycle:
        cls = self.task_cls
        setup, teardown = cls.setup, cls.teardown

        async def counted_setup(task: Task) -> list[dict[str, Any]]:
            self.sessions.append(task)
            return await setup(task)

        async def counted_teardown(task: Task) -> None:
            self.teardowns[id(task)] = self.teardowns.get(id(task), 0) + 1
            await teardown(task)

        for attr, fn in (("setup", counted_setup), ("teardown", counted_teardown)):
            self._saved[attr] = vars(cls).get(attr)
            setattr(cls, attr, fn)
        return self

    def __exit__(self, *exc: object) -> None:
        for attr, original in self._saved.items():
            if original is None:
                delattr(self.task_cls, attr)
            else:
                setattr(self.task_cls, attr, original)

    def problems(self) -> list[str]:
        out = [
            f"session #{i} (sample {t.sample.get('id', '?') if isinstance(t.sample, dict) else '?'}): "
            f"teardown ran {self.teardowns.get(id(t), 0)} times"
            for i, t in enumerate(self.sessions)
            if self.teardowns.get(id(t), 0) != 1
        ]
        strays = set(self.teardowns) - {id(t) for t in self.sessions}
        if strays:
            out.append(f"teardown ran on {len(strays)} task objects whose setup never ran")
        return out


class _WorkerSessions:
    """The :class:`~agentrl_envs.agent.Sessions` transport over a :class:`WorkerService` (no HTTP)."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self._ids = itertools.count(1)

    async def start_sample_when_free(self, task: str, index: Any, *, timeout: float = 0.0, delay: Any = None) -> Any:
        session_id = next(self._ids)
        out = await self.service.start_sample(session_id, index)
        first = start_response(out)
        return session_id, first

    async def interact(self, session_id: int, messages: list[dict[str, Any]]) -> InteractResponse:
        out = await self.service.interact(session_id, messages)
        return interact_response(out)

    async def cancel_quietly(self, session_id: int) -> None:
        with contextlib.suppress(UnknownSessionError):
            await self.service.cancel(session_id)


class _NoToolPolicy:
    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(NO_CALL)


def check_teardown(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """Ended, cancelled and shut-down sessions each run ``teardown`` once; nothing stays held."""
    split = split_of(task_cls, split)
    with _Lifecycle(task_cls) as counts:
        notes = asyncio.run(_teardown(task_cls, split, config, counts))
    problems = counts.problems()
    assert not problems, f"{task_label(task_cls, split)}: expected teardown exactly once per session, got: " + "; ".join(problems)
    return notes


async def _teardown(task_cls: type[Task], split: str | None, config: dict[str, Any] | None, counts: _Lifecycle) -> list[str]:
    from ..worker import WorkerService

    who = task_label(task_cls, split)
    notes: list[str] = []
    runtime = TaskRuntime(task_cls, split=split, config=config)
    assert runtime.indices, f"{who}: expected samples, got none"
    service = WorkerService(runtime, idle_timeout=3600.0)
    sessions = _WorkerSessions(service)
    await service.startup()
    stopped = False
    try:

        def held(where: str) -> None:
            left = service.get_sessions()
            assert not left and service.status()["current"] == 0, (
                f"{who}: expected the worker to hold no session {where}, got {left} ({service.status()})"
            )

        # 1. an episode the task ends: the first sample's reference, else no tool calls up to the limit
        index = next((i for i in runtime.indices if task_cls.reference_policy(runtime.samples[i]) is not None), 0)
        reference = task_cls.reference_policy(runtime.samples[index])
        policy = as_policy(reference) if reference is not None else _NoToolPolicy()
        t = await run_episode(sessions, task_cls.name, index, policy, stops=[MaxTurns(200)])
        assert t.outcome is not None and t.status not in (SampleStatus.TASK_ERROR, SampleStatus.UNKNOWN), (
            f"{who}: expected sample {index} to play to its end, got status {t.status.value!r}: {shorten(t.error)}"
        )
        if t.metrics.get("stopped_by_client"):
            notes.append(f"sample {index} did not end within 200 rounds: the client cancelled it")
        held(f"after sample {index} ended ({t.status.value})")
        assert len(counts.sessions) == 1, f"{who}: expected one session set up, got {len(counts.sessions)}"

        # 2. an episode the client cancels after one round
        session = AgentSession(sessions, task_cls.name, 0)
        await session.start()
        assert not session.done, f"{who}: expected sample 0 to start, got status {session.transcript.status.value!r}"
        await session.act(dict(NO_CALL))
        assert not session.done, f"{who}: expected sample 0 to go on after one round, got {session.transcript.status.value!r}"
        await session.close()
        held("after a session was cancelled")
        cancelled = counts.sessions[-1]
        assert cancelled.status == SampleStatus.CANCELLED, (
            f"{who}: expected the cancelled session's status 'cancelled', got {cancelled.status.value!r}"
        )

        # 3. an episode still running when the worker shuts down
        session = AgentSession(sessions, task_cls.name, 0)
        await session.start()
        assert not session.done, f"{who}: expected sample 0 to start, got status {session.transcript.status.value!r}"
        stopped = True
        await service.shutdown()
        held("after the worker shut down")
    finally:
        if not stopped:
            await service.shutdown()
    assert len(counts.sessions) == 3, f"{who}: expected 3 sessions set up, got {len(counts.sessions)}"
    try:
        await runtime.close()  # shutdown closed it: a second close must be harmless
        await runtime.open()
        await runtime.close()
    except Exception as e:
        raise AssertionError(f"{who}: expected TaskRuntime.close()/open()/close() after shutdown to work, got {e!r}") from e
    return notes
