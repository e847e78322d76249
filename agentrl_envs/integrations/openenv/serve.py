"""Any of our tasks served as an OpenEnv environment (openenv-core's HTTP and WebSocket protocol).

``agentrl-envs openenv serve db --split easy`` (or :func:`create_openenv_app`) builds the app with
openenv-core's own server (``create_fastapi_app``), so the routes and the session protocol are
openenv-core's: ``/ws`` (one WebSocket, one environment instance, ``reset`` / ``step`` / ``state``
/ ``close`` messages), ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``.
Each OpenEnv session is one of our sessions: of a task run in this process (the default: the
same :class:`~agentrl_envs.episode.TaskRuntime` a worker runs) or behind a controller
(``controller=URL``).

Actions (:class:`TaskAction`), one per step:

* ``{"type": "message", "content": ..., "tool_calls": [...]}`` — one assistant turn in OpenAI's
  shape (``arguments`` a JSON string or an object); observed as a :class:`TaskObservation`
  holding the new messages (tool replies, or the task's answer to text: kg's
  ``Final Answer: #3`` is sent this way);
* ``{"type": "list_tools"}`` and ``{"type": "call_tool", "tool_name": ..., "arguments": {...}}`` —
  OpenEnv's MCP tool actions, so openenv-core's ``MCPToolClient`` (``list_tools()``,
  ``call_tool(name, **args)``) plays a task unchanged; a call is one round of the session.

``reset(index=..)`` starts that sample (else sample ``seed % n``, else the next in turn) and
observes the opening messages and the task's OpenAI tool definitions (``tool_schemas``). The
reward is 0 until the task ends the episode, then the task's reward; ``done`` says it ended.
openenv-core's HTTP ``/step`` is stateless (each request a fresh environment), so an episode is
played over ``/ws``; HTTP ``/step`` answers 500 ("call reset first").
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import uuid
from typing import Any, Literal

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import CallToolObservation, ListToolsObservation, Tool
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from ...agent import AgentSession, InProcessSessions, Sessions
from ...errors import AgentRLEnvsError, InfrastructureError, SessionFinishedError
from ...policy import call_turn
from ...protocol.agentrl import SampleIndex
from ...protocol.openai import Message
from ..loop_thread import LoopThread

__all__ = ["TaskAction", "TaskEnvironment", "TaskObservation", "TaskState", "create_openenv_app"]


class TaskAction(Action):
    """One step: an assistant turn (``message``) or an OpenEnv MCP tool action."""

    type: Literal["message", "call_tool", "list_tools"] = Field(
        default="message", description="message: an assistant turn; call_tool / list_tools: OpenEnv's MCP tool actions"
    )
    content: str | None = Field(default=None, description="message: the assistant's text")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description='message: OpenAI tool calls, {"function": {"name", "arguments"}}'
    )
    tool_name: str | None = Field(default=None, description="call_tool: the tool to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="call_tool: its arguments")


class TaskObservation(Observation):
    """What a ``reset`` or a ``message`` step observes (``done``/``reward`` as OpenEnv's base)."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="the new messages (OpenAI chat format)")
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list, description="reset: the task's OpenAI tool definitions")
    status: str = Field(default="running", description="the session's status (AgentRL's statuses)")
    index: int | str | None = Field(default=None, description="the sample being played")
    metrics: dict[str, Any] = Field(default_factory=dict, description="the task's metrics so far (turns, tool errors...)")


class TaskState(State):
    """``episode_id``/``step_count`` (OpenEnv's) plus the session's task, sample and standing."""

    task: str = ""
    index: int | str | None = None
    status: str = "running"
    reward: float = 0.0


class _Backend:
    """What every OpenEnv session of one app shares: the loop our sessions run on and where they
    live (an in-process task runtime, opened on first use, or a controller)."""

    def __init__(
        self, task: str, *, controller: str | None, split: str | None, data: str | None, options: dict[str, Any]
    ) -> None:
        self.task = task
        self.loop = LoopThread(f"agentrl-openenv-{task}")
        self._lock = threading.Lock()
        self._cycle: Any = None
        self.runtime: Any = None
        self.sessions: Sessions
        if controller is not None:
            client = self.loop.run(self._client(controller))
            self.sessions = client
            self.indices: list[SampleIndex] = self.loop.run(client.get_indices(task))
            self.description = f"AgentRL task {task!r} behind {controller}"
            self._close_sessions = client.aclose
        else:
            from ...episode import TaskRuntime
            from ...registry import get_task

            cls = get_task(task)
            split = split if split or data else (cls.splits[0] if cls.splits else None)
            self.runtime = TaskRuntime(cls, split=split, data=data, config=options)
            self.loop.run(self.runtime.open())
            sessions = InProcessSessions(self.runtime)
            self.sessions = sessions
            self.indices = list(self.runtime.indices)
            self.description = (cls.__doc__ or f"AgentRL task {task!r}").strip().split("\n\n")[0]
            self._close_sessions = sessions.aclose
        if not self.indices:
            raise AgentRLEnvsError(f"task {task!r} has no samples")

    @staticmethod
    async def _client(url: str) -> Any:
        from ...client import AsyncControllerClient

        return AsyncControllerClient(url)

    def pick(self, index: SampleIndex | None, seed: int | None) -> SampleIndex:
        if index is not None:
            return index
        if seed is not None:
            return self.indices[seed % len(self.indices)]
        with self._lock:
            self._cycle = self._cycle or itertools.cycle(self.indices)
            return next(self._cycle)

    def close(self) -> None:
        async def shut() -> None:
            await self._close_sessions()
            if self.runtime is not None:
                await self.runtime.close()

        self.loop.run(shut())
        self.loop.stop()


def _tool_call(call: dict[str, Any], n: int) -> dict[str, Any]:
    """An OpenAI tool call as the wire carries it (``arguments`` a JSON string, an ``id``)."""
    function = dict(call.get("function") or {})
    if not isinstance(function.get("arguments", "{}"), str):
        function["arguments"] = json.dumps(function["arguments"])
    return {"id": call.get("id") or f"call_{n}", "type": "function", "function": function}


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(Message.model_validate(m).text() for m in messages)


class TaskEnvironment(Environment):
    """An OpenEnv environment whose every episode is a session of our task (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, backend: _Backend) -> None:
        super().__init__()
        self._backend = backend
        self._session: AgentSession | None = None
        self._state = TaskState(task=backend.task)

    # The server awaits the *_async methods on its own loop; the sessions live on the backend's.
    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, index: SampleIndex | None = None, **kwargs: Any
    ) -> TaskObservation:
        return await self._backend.loop.wait(self._reset(seed, episode_id, index))

    async def step_async(self, action: TaskAction, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return await self._backend.loop.wait(self._step(action))

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, index: SampleIndex | None = None, **kwargs: Any
    ) -> TaskObservation:
        return self._backend.loop.run(self._reset(seed, episode_id, index))

    def step(self, action: TaskAction, timeout_s: float | None = None, **kwargs: Any) -> Observation:  # type: ignore[override]
        return self._backend.loop.run(self._step(action))

    @property
    def state(self) -> TaskState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self._backend.task, description=self._backend.description, version="1")

    def close(self) -> None:
        """Cancel a running session. The server may call this on its own loop (HTTP handlers)
        or from an executor thread; it never waits on the backend's loop from a loop."""
        session, self._session = self._session, None
        if session is not None and not session.done:
            self._backend.loop.submit(session.close())

    async def _reset(self, seed: int | None, episode_id: str | None, index: SampleIndex | None) -> TaskObservation:
        if self._session is not None:
            await self._session.close()
        index = self._backend.pick(index, seed)
        session = AgentSession(self._backend.sessions, self._backend.task, index)
        t = await session.start()
        if session.failure is not None:
            raise InfrastructureError(f"could not start {self._backend.task} #{index}: {t.error}")
        self._session = session
        self._state = TaskState(episode_id=episode_id or str(uuid.uuid4()), task=self._backend.task, index=index)
        return self._observe(list(t.messages), list(t.tools))

    async def _step(self, action: TaskAction) -> Observation:
        if action.type == "list_tools":
            tools = self._session.transcript.tools if self._session is not None else []
            return ListToolsObservation(
                tools=[
                    Tool(name=f["name"], description=f.get("description", ""), input_schema=f.get("parameters", {}))
                    for f in (t["function"] for t in tools)
                ]
            )
        session = self._session
        if session is None:
            raise AgentRLEnvsError("no episode: call reset first (over /ws; HTTP /step is stateless)")
        if session.done:
            raise SessionFinishedError(
                f"the episode ended ({session.transcript.status.value}): call reset", status=session.transcript.status.value
            )
        if action.type == "call_tool":
            message = call_turn(action.tool_name or "", action.arguments)
        else:
            calls = [_tool_call(c, n) for n, c in enumerate(action.tool_calls)]
            message = {"role": "assistant", "content": action.content, **({"tool_calls": calls} if calls else {})}
        new = await session.act(message)
        if session.failure is not None:
            raise InfrastructureError(f"the session failed: {session.transcript.error}")
        self._state.step_count += 1
        obs = self._observe(new, [])
        if action.type == "call_tool":
            return CallToolObservation(tool_name=action.tool_name or "", result=_text(new), done=obs.done, reward=obs.reward)
        return obs

    def _observe(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> TaskObservation:
        t = self._session.transcript if self._session is not None else None
        assert t is not None
        self._state.status, self._state.reward = t.status.value, float(t.reward)
        done = t.finished
        return TaskObservation(
            messages=messages,
            tool_schemas=tools,
            status=t.status.value,
            done=done,
            reward=float(t.reward) if done else 0.0,
            index=t.index,
            metrics=dict(t.metrics),
        )


def create_openenv_app(
    task: str,
    *,
    controller: str | None = None,
    split: str | None = None,
    data: str | None = None,
    options: dict[str, Any] | None = None,
    max_sessions: int = 64,
) -> Any:
    """openenv-core's FastAPI app serving ``task`` (in this process, or through ``controller``);
    at most ``max_sessions`` WebSocket sessions at once (openenv-core's ``max_concurrent_envs``)."""
    if controller is not None and (split or data or options):
        raise ValueError("split, data and options choose the in-process task's data; a controller's workers have their own")
    backend = _Backend(task, controller=controller, split=split, data=data, options=options or {})
    app = create_fastapi_app(
        functools.partial(TaskEnvironment, backend), TaskAction, TaskObservation, max_concurrent_envs=max_sessions
    )
    app.router.on_shutdown.append(backend.close)
    app.state.agentrl_backend = backend
    return app
