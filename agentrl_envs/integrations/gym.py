"""Every task as a ``gymnasium.Env`` whose actions are assistant messages with tool calls.

``make("db", split="dev")`` runs the task in-process; ``make("db", controller=URL)`` runs the same
episode on a worker behind a controller. Both are the one agent loop's client-side session
(:class:`agentrl_envs.agent.AgentSession`) over another transport, so they behave identically:

* ``reset(seed=None, options={"index": i})`` → ``({"messages": opening, "tools": tools}, info)``;
  without an index the sample is drawn with the env's seeded RNG;
* ``step(assistant_message)`` → ``({"messages": new, "tools": tools}, reward, terminated,
  truncated, info)`` where *truncated* means the task's turn limit ended the episode and
  ``info`` holds ``status``, ``metrics`` and, once the episode ended, its ``outcome``
  (``solved``, ``failed``, ``task limit`` or ``infrastructure failure``).

``import agentrl_envs`` registers every installed task as ``agentrl/<task>-v0``, so
``gymnasium.make("agentrl/db-v0")`` works as for any other env.
"""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from pydantic import ValidationError

from ..agent import AgentSession, InProcessSessions, Sessions
from ..client import AsyncControllerClient
from ..episode import TaskRuntime
from ..protocol.agentrl import SampleStatus
from ..protocol.openai import Message, function_call
from ..registry import get_task, register_all

_WORDS = ("select", "table", "name", "count", "value", "id", "list", "42", "true", "x")


def _valid_messages(messages: Any, roles: set[str] | None = None) -> bool:
    if not isinstance(messages, list):
        return False
    try:
        parsed = [Message.model_validate(m) for m in messages]
    except ValidationError:
        return False
    return roles is None or all(m.role in roles for m in parsed)


class ObservationSpace(gym.spaces.Space[dict[str, Any]]):
    """``{"messages": [OpenAI chat messages], "tools": [OpenAI tool definitions]}``."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed=seed)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, dict)
            and set(x) == {"messages", "tools"}
            and _valid_messages(x["messages"])
            and isinstance(x["tools"], list)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": str(self.np_random.choice(_WORDS))}], "tools": []}

    @property
    def is_np_flattenable(self) -> bool:
        return False


class ActionSpace(gym.spaces.Space[dict[str, Any]]):
    """An assistant message; ``sample()`` calls a random tool with arguments drawn from its schema."""

    def __init__(self, tools: list[dict[str, Any]], seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.tools = tools

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict) and _valid_messages([x], {"assistant"})

    def _value(self, schema: dict[str, Any]) -> Any:
        kind = schema.get("type", "string")
        if kind == "array":
            return [self._value(schema.get("items", {})) for _ in range(int(self.np_random.integers(0, 3)))]
        if kind == "integer":
            return int(self.np_random.integers(0, 100))
        if kind == "number":
            return float(self.np_random.random())
        if kind == "boolean":
            return bool(self.np_random.integers(0, 2))
        return str(self.np_random.choice(_WORDS))

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        if not self.tools:
            return {"role": "assistant", "content": str(self.np_random.choice(_WORDS))}
        fn = self.tools[int(self.np_random.integers(0, len(self.tools)))]["function"]
        props = fn.get("parameters", {}).get("properties", {})
        args = {name: self._value(schema) for name, schema in props.items()}
        call_id = f"call_{int(self.np_random.integers(0, 2**31)):08x}"
        return {"role": "assistant", "content": None, "tool_calls": [function_call(call_id, fn["name"], args)]}

    @property
    def is_np_flattenable(self) -> bool:
        return False


class AgentEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        task: str,
        *,
        split: str | None = None,
        data: str | None = None,
        options: dict[str, Any] | None = None,
        controller: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.task = task
        self.render_mode = render_mode
        self._session: AgentSession | None = None
        self._runtime: TaskRuntime | None = None
        self._loop = asyncio.Runner()
        self._sessions: Sessions
        if controller:
            self._client: AsyncControllerClient | None = AsyncControllerClient(controller)
            self._sessions = self._client
            self._indices = list(self._loop.run(self._client.get_indices(task)))
            tools: list[dict[str, Any]] = []
        else:
            self._client = None
            cls = get_task(task)
            split = split if split or data else (cls.splits[0] if cls.splits else None)
            self._runtime = TaskRuntime(cls, split=split, data=data, config=options)
            self._loop.run(self._runtime.open())
            self._sessions = InProcessSessions(self._runtime)
            self._indices = self._runtime.indices
            tools = cls.tool_definitions()
        self.observation_space = ObservationSpace()
        self.action_space = ActionSpace(tools)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.action_space.tools

    def _end_session(self) -> None:
        if self._session is not None:
            self._loop.run(self._session.close())
            self._session = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._end_session()
        if options and "index" in options:
            index = options["index"]
        else:
            index = self._indices[int(self.np_random.integers(0, len(self._indices)))]
        self._session = AgentSession(self._sessions, self.task, index)
        t = self._loop.run(self._session.start())
        if self._session.failure is not None:  # the start itself failed: say why, as the transport did
            failure, self._session = self._session.failure, None
            raise failure
        self.action_space.tools[:] = t.tools
        info = {"index": index, "session_id": t.session_id}
        return {"messages": list(t.messages), "tools": list(t.tools)}, info

    def step(self, action: dict[str, Any] | Message) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._session is None or self._session.done:
            raise ResetNeeded("the episode has ended (or never started): call reset() first")
        new = self._loop.run(self._session.act(action))
        t = self._session.transcript
        truncated = t.status == SampleStatus.TASK_LIMIT_REACHED
        terminated = t.finished and not truncated
        info: dict[str, Any] = {"status": t.status.value, "metrics": dict(t.metrics)}
        if t.outcome is not None:
            info["outcome"] = t.outcome.value
            if t.error:
                info["error"] = t.error
        return {"messages": new, "tools": list(self.tools)}, float(t.reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self._session.transcript.messages if self._session is not None else []:
            calls = " ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m.get("tool_calls") or [])
            lines.append(f"[{m['role']}] {m.get('content') or ''}{(' ' + calls) if calls else ''}")
        return "\n".join(lines)

    def close(self) -> None:
        if self._loop is None:
            return
        self._end_session()
        if self._runtime is not None:
            self._loop.run(self._runtime.close())
            self._runtime = None
        if self._client is not None:
            self._loop.run(self._client.aclose())
            self._client = None
        self._loop.close()
        self._loop = None  # type: ignore[assignment]
        super().close()


def make(task: str, **kwargs: Any) -> AgentEnv:
    """``make("db", split="dev")`` (in-process) or ``make("db", controller="http://...")``."""
    return AgentEnv(task, **kwargs)


__all__ = ["ActionSpace", "AgentEnv", "ObservationSpace", "make", "register_all"]
