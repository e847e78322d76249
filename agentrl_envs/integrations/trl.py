"""Our tasks as TRL environments: ``GRPOTrainer(environment_factory=...)`` (TRL ≥ 1.16).

TRL's contract (``trl/trainer/grpo_trainer.py``): ``environment_factory`` is a callable returning
an environment, or a dict ``{name: callable}`` when each dataset row picks its environment in an
``environment`` column. TRL makes one instance per rollout (pooled, reused), exposes every public
method except ``reset`` and ``get_reward`` to the model as a tool (schema from the type hints and
Google-style docstring), calls ``reset(**row)`` before generating (a returned string is appended
to the prompt's last message), calls the tools the model asks for (a raised exception becomes
``{"error": ...}`` for the model), and once the rollout is over reads ``get_reward()``: a reward
column named after the environment's class (``rewards/DbEnv/mean``), ``None`` leaving it unscored.

Here each instance is a session of one of our tasks behind a controller::

    envs = environment_factory(["db", "kg"], split="easy")   # starts a LocalStack, once
    trainer = GRPOTrainer(
        model, args=GRPOConfig(...), processing_class=tokenizer,
        environment_factory=envs,                 # {"db": DbEnv, "kg": KgEnv}
        train_dataset=envs.dataset(limit=64),     # prompt, environment, index per sample
        reward_funcs=[send_final_text],           # for tasks that end in text (kg)
    )

* the tools are the task's own (its OpenAI tool schemas, fetched from the controller), as typed
  methods; each call is one round of the session (one assistant message with one tool call), and
  the tool's answer is what the task replied — a bad call is answered the way the task answers it;
* ``reset(index=..., prompt=...)`` starts the sample the row names (``index``; without one, the
  next sample in turn). The row's ``prompt`` already holds the opening messages
  (:meth:`EnvironmentFactories.dataset`), so reset returns nothing; when the row has no real
  prompt (TRL's placeholder), reset returns the opening messages' text instead;
* ``get_reward()`` is the task's reward. A rollout that stopped calling tools before the task
  ended its episode is cancelled and scores 0 (the model's failure); one that ended in an
  infrastructure failure returns ``None`` (never scored, see :mod:`agentrl_envs.agent`).

TRL never shows an environment the model's last message: a rollout ends when the model writes
text instead of a tool call, and that text stays in TRL. A task whose answer *is* text (kg's
``Final Answer: #3``) needs it, so :func:`send_final_text` — a reward function that scores nothing
(``None``, left out of TRL's sum) — sends each rollout's final text to its session before
``get_reward`` reads the reward. Put it in ``reward_funcs``; for tasks that end with a tool call it
changes nothing.

The sessions run through :class:`~agentrl_envs.client.AsyncControllerClient` on one event-loop
thread per :func:`environment_factory` call (TRL calls tools synchronously from its own thread).
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, ClassVar, TypeVar

from ..agent import AgentSession, Outcome, Transcript
from ..client import AsyncControllerClient
from ..errors import AgentRLEnvsError, InfrastructureError
from ..policy import call_turn
from ..protocol.agentrl import SampleIndex, SampleStatus
from ..protocol.openai import Message
from .loop_thread import LoopThread
from .typed_tools import tool_function

__all__ = ["EnvironmentFactories", "TaskEnvironment", "environment_factory", "send_final_text", "trl_prompt"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Methods TRL treats specially; a task tool with one of these names cannot be a method.
_RESERVED = frozenset({"reset", "get_reward"})


def trl_prompt(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wire messages as a TRL / transformers chat: tool-call ``arguments`` as dicts (chat
    templates render them with ``tojson``), ``content`` never ``None``, a tool message carrying
    its tool's ``name``. Arguments that are not valid JSON stay the model's string."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for raw in messages:
        m = Message.model_validate(raw)
        msg: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.tool_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    arguments: Any = json.loads(c.function.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = c.function.arguments
                names[c.id] = c.function.name
                calls.append({"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": arguments}})
            msg["tool_calls"] = calls
        if m.role == "tool":
            msg["tool_call_id"] = m.tool_call_id
            if m.tool_call_id in names:
                msg["name"] = names[m.tool_call_id]
        out.append(msg)
    return out


def _is_placeholder(prompt: Any) -> bool:
    """TRL's stand-in prompt (``[{"role": "user", "content": ""}]``) when the data has none."""
    return not prompt or all(not (isinstance(m, dict) and m.get("content")) for m in prompt)


def _opening_text(messages: Sequence[dict[str, Any]]) -> str:
    return "\n\n".join(Message.model_validate(m).text() for m in messages if Message.model_validate(m).text())


def _class_name(task: str) -> str:
    """``db`` → ``DbEnv``, ``my-task`` → ``MyTaskEnv``: the name TRL logs the reward under."""
    return "".join(part.capitalize() for part in task.replace("-", "_").split("_") if part) + "Env"


class _Hub:
    """What every environment of one :func:`environment_factory` call shares: the event-loop
    thread, the controller client, the embedded stack (if we started one), each task's tools,
    indices and opening messages, and the record of finished episodes."""

    def __init__(self, controller: str, stack: Any, start_timeout: float) -> None:
        self.url = controller
        self.stack = stack
        self.start_timeout = start_timeout
        self.loop = LoopThread("agentrl-trl-loop")
        self.client = self.run(self._client(controller))
        self.episodes: list[Transcript] = []
        self.indices: dict[str, list[SampleIndex]] = {}
        self._cycle: dict[str, itertools.cycle] = {}
        self._lock = threading.Lock()
        self.closed = False

    @staticmethod
    async def _client(url: str) -> AsyncControllerClient:
        return AsyncControllerClient(url)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run(coro)

    def next_index(self, task: str) -> SampleIndex:
        with self._lock:
            return next(self._cycle.setdefault(task, itertools.cycle(self.indices[task])))

    async def opening(self, task: str, index: SampleIndex) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The opening messages and tools of ``task``'s sample ``index`` (a session started and cancelled)."""
        session = AgentSession(self.client, task, index, start_timeout=self.start_timeout)
        t = await session.start()
        if session.failure is not None:
            raise session.failure
        await session.close()
        return list(t.messages), list(t.tools)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.run(self.client.aclose())
        finally:
            self.loop.stop()
            if self.stack is not None:
                self.stack.stop()


class TaskEnvironment:
    """One rollout's session of one task; :func:`environment_factory` makes a subclass per task
    whose public methods are the task's tools. See the module docstring for the contract."""

    _hub: ClassVar[_Hub]
    _task: ClassVar[str]
    _tools: ClassVar[list[dict[str, Any]]]

    def __init__(self) -> None:
        self._session: AgentSession | None = None
        self._recorded = False

    @property
    def transcript(self) -> Transcript | None:
        """The current (or last) episode as the client saw it."""
        return self._session.transcript if self._session is not None else None

    def reset(self, index: SampleIndex | None = None, prompt: list[dict[str, Any]] | None = None, **row: Any) -> str | None:
        """Start the sample ``index`` of this task (the next one in turn when the row names none).

        Returns ``None`` when the row's ``prompt`` holds the opening messages, else their text
        (TRL appends it to the prompt's last message)."""
        hub = self._hub
        self._end()
        if index is None:
            index = hub.next_index(self._task)
        session = AgentSession(hub.client, self._task, index, start_timeout=hub.start_timeout)
        transcript = hub.run(session.start())
        if session.failure is not None:
            raise session.failure
        self._session, self._recorded = session, False
        if _is_placeholder(prompt):
            return _opening_text(transcript.messages)
        if trl_prompt(transcript.messages) != prompt:
            log.warning("%s #%s: the row's prompt differs from the session's opening messages", self._task, index)
        return None

    def get_reward(self) -> float | None:
        """The task's reward for the rollout (``None``: an infrastructure failure, not scored).

        A session the model left running (it stopped calling tools) is cancelled and scores 0."""
        session = self._session
        if session is None:
            return None
        if not session.done:
            self._hub.run(
                session.stop(
                    SampleStatus.CANCELLED,
                    error="the model stopped calling tools before the episode ended",
                    outcome=Outcome.FAILED,
                )
            )
        t = session.transcript
        if not self._recorded:
            self._hub.episodes.append(t)
            self._recorded = True
        return float(t.reward) if t.outcome is not None and t.outcome.scored else None

    def _send(self, message: dict[str, Any]) -> str:
        """Play one round of the session; the text of what the task answered."""
        session = self._session
        if session is None:
            raise AgentRLEnvsError("call reset() before using the environment")
        if session.done:
            t = session.transcript
            return f"The episode has ended (status: {t.status.value}); no further action is taken."
        new = self._hub.run(session.act(message))
        if session.failure is not None:
            raise InfrastructureError(f"{self._task}: the session failed: {session.transcript.error}")
        return "\n".join(Message.model_validate(m).text() for m in new)

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        return self._send(call_turn(name, arguments))

    def _end(self) -> None:
        """Cancel the current session if it is still running (its episode is not recorded)."""
        if self._session is not None and not self._session.done:
            self._hub.run(self._session.close())
        self._session = None


def send_final_text(completions: list[Any], environments: list[Any] | None = None, **kwargs: Any) -> list[None]:
    """A reward function that scores nothing: it sends each rollout's final assistant text (the
    message without tool calls that ended the rollout) to its still-running session, so that a
    task whose answer is text (kg's ``Final Answer: #3``) can score it before TRL reads
    ``get_reward()``. Returns ``None`` per rollout (left out of TRL's reward sum). Pass it in
    ``reward_funcs``; TRL runs reward functions before the environments' ``get_reward``."""
    for completion, env in zip(completions, environments or [], strict=False):
        if not isinstance(env, TaskEnvironment) or env._session is None or env._session.done:
            continue
        last = completion[-1] if isinstance(completion, list) and completion else None
        if isinstance(last, dict) and last.get("role") == "assistant" and not last.get("tool_calls"):
            env._send({"role": "assistant", "content": last.get("content") or ""})
    return [None] * len(completions)


class EnvironmentFactories(dict):
    """``{task: environment class}`` — what ``GRPOTrainer(environment_factory=...)`` takes — plus
    the dataset rows of those tasks and the episodes played (``episodes``: one
    :class:`~agentrl_envs.agent.Transcript` per ``get_reward``, in call order)."""

    def __init__(self, hub: _Hub, classes: dict[str, type[TaskEnvironment]]) -> None:
        super().__init__(classes)
        self._hub = hub

    @property
    def episodes(self) -> list[Transcript]:
        return self._hub.episodes

    @property
    def controller(self) -> str:
        """The controller's URL (the embedded stack's when we started one)."""
        return self._hub.url

    def rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """One row per sample of each task (the first ``limit`` of each): ``prompt`` (its opening
        messages, as :func:`trl_prompt`), ``environment`` (the task), ``index``. Each sample is
        started once and cancelled to read its opening messages."""

        async def all_rows() -> list[dict[str, Any]]:
            out = []
            for task in self:
                for index in self._hub.indices[task][:limit]:
                    messages, _ = await self._hub.opening(task, index)
                    out.append({"prompt": trl_prompt(messages), "environment": task, "index": index})
            return out

        return self._hub.run(all_rows())

    def dataset(self, limit: int | None = None) -> Any:
        """:meth:`rows` as a ``datasets.Dataset``. ``prompt`` and ``index`` are JSON columns, so
        each row keeps its own tool-call arguments and index type (Arrow would otherwise merge
        the argument dicts of all rows into one struct and fill the gaps with nulls)."""
        from datasets import Dataset, Features, Json, List, Value

        features = Features({"prompt": List(Json()), "environment": Value("string"), "index": Json()})
        return Dataset.from_list(self.rows(limit), features=features)

    def close(self) -> None:
        """Close the controller client and stop the embedded stack (also done at exit)."""
        self._hub.close()

    def __enter__(self) -> EnvironmentFactories:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _environment_class(task: str, tools: list[dict[str, Any]], hub: _Hub) -> type[TaskEnvironment]:
    namespace: dict[str, Any] = {"_hub": hub, "_task": task, "_tools": tools, "__module__": __name__}
    for definition in tools:
        method = tool_function(definition, TaskEnvironment._call_tool, reserved=_RESERVED)
        namespace[method.__name__] = method
    cls = type(_class_name(task), (TaskEnvironment,), namespace)
    cls.__doc__ = f"A session of task {task!r}; its tools: {', '.join(t['function']['name'] for t in tools)}."
    return cls


def environment_factory(
    tasks: Sequence[str],
    *,
    controller: str | None = None,
    split: str | None = None,
    data: dict[str, str] | None = None,
    task_options: dict[str, dict[str, Any]] | None = None,
    start_timeout: float = 60.0,
) -> EnvironmentFactories:
    """``{task: environment class}`` for ``GRPOTrainer(environment_factory=...)``.

    ``controller``: the URL of a running controller whose workers serve ``tasks``; ``None``
    starts an embedded :class:`~agentrl_envs.stack.LocalStack` of ``tasks`` (with ``split``,
    ``data`` and ``task_options``, as ``agentrl-envs up``), shared by every environment of the
    result and stopped by :meth:`EnvironmentFactories.close` or at exit. ``start_timeout``: how
    long a ``reset`` waits for a free worker slot."""
    if not tasks:
        raise ValueError("environment_factory needs at least one task")
    stack = None
    if controller is None:
        from ..stack import LocalStack

        stack = LocalStack(list(tasks), split=split, data=data, task_options=task_options)
        stack.__enter__()
        controller = stack.url
    elif split or data or task_options:
        raise ValueError("split, data and task_options choose the embedded stack's data; a running controller has its own")
    hub = _Hub(controller, stack, start_timeout)
    try:

        async def discover() -> dict[str, list[dict[str, Any]]]:
            tools = {}
            for task in tasks:
                hub.indices[task] = list(await hub.client.get_indices(task))
                if not hub.indices[task]:
                    raise AgentRLEnvsError(f"task {task!r} has no samples behind {controller}")
                _, tools[task] = await hub.opening(task, hub.indices[task][0])
            return tools

        classes = {task: _environment_class(task, tools, hub) for task, tools in hub.run(discover()).items()}
    except BaseException:
        hub.close()
        raise
    atexit.register(hub.close)
    return EnvironmentFactories(hub, classes)
