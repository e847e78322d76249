"""The multi-turn loop, written once: one :class:`Episode` drives one :class:`Task` session.

``start()`` returns the opening messages and tools; each ``step(messages)`` takes the model's
assistant message, runs its tool calls in order and returns only the *new* messages (one tool
message per call, or a user message when the model called no tool) with reward and status.

Who is at fault decides what happens (see :mod:`agentrl_envs.errors`):

* bad tool call (invalid JSON, unknown tool, wrong or missing arguments) → a tool message the
  model can read; the round counts; the episode goes on;
* no tool call → :meth:`Task.on_text` answers the text (by default a user message asking for a
  tool call; a task whose answers are text, like KG's ``Final Answer: #3``, may end the episode);
* the task raises anything else → the episode ends with status ``task error`` (never scored as
  the model's failure);
* ``task.turn_limit`` rounds (the session's own limit) without the task finishing → ``task limit reached``, reward 0
  (gymnasium: *truncated*).

A task that follows another harness's rules for a whole assistant message (BFCL ends a user turn
when a message's calls do not decode) answers it in :meth:`Task.on_assistant` instead. When a
step changes the session's tools (:meth:`Task.session_tools`), the step's output carries the new
list in ``tools`` (``None`` otherwise).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import DataError, InvalidRequestError, SessionFinishedError, ToolCallError, UnknownSampleError
from .protocol.agentrl import EnvOutput, SampleIndex, SampleStatus
from .protocol.openai import Message, ToolCall, tool_message
from .task import Task

log = logging.getLogger(__name__)


class Episode:
    """One session of one task. Not thread-safe: one ``step`` at a time (the worker enforces it)."""

    def __init__(self, task: Task, *, index: SampleIndex | None = None) -> None:
        self.task = task
        self.index = index
        self.turns = 0
        self.tool_errors = 0
        self.started = False
        self.closed = False
        #: The tools the client was last sent (at the start, or with the step that changed them).
        self._tools: list[dict[str, Any]] = []

    @property
    def finished(self) -> bool:
        return self.task.done

    @property
    def status(self) -> SampleStatus:
        return self.task.status

    def output(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> EnvOutput:
        t = self.task
        metrics = {"turns": self.turns, "tool_errors": self.tool_errors, **t.metrics}
        return EnvOutput(messages=messages, tools=tools, status=t.status, finish=t.done, reward=t.reward, metric=metrics)

    async def start(self) -> EnvOutput:
        self.started = True
        try:
            opening = await self.task.setup()
        except Exception as e:
            await self._fail(e, "setup")
            return self.output([], type(self.task).tool_definitions())
        self._tools = self.task.session_tools()
        return self.output([_wire_message(m) for m in opening], self._tools)

    async def step(self, messages: list[dict[str, Any]] | list[Message]) -> EnvOutput:
        if self.finished:
            raise SessionFinishedError(f"the episode already ended with status {self.status.value!r}", status=self.status.value)
        try:
            parsed = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        except ValidationError as e:
            raise InvalidRequestError(f"invalid assistant message: {e.errors()[0].get('msg')}") from None
        assistant = [m for m in parsed if m.role == "assistant"]
        self.turns += 1
        new: list[dict[str, Any]] = []
        try:
            handled = await self.task.on_assistant(assistant)
        except Exception as e:  # the task's own fault
            await self._fail(e, "on_assistant")
            return self.output(new)
        if handled is not None:
            new = [_wire_message(m) for m in handled]
        elif not await self._dispatch(assistant, new):
            return self.output(new)
        if not self.finished and self.turns >= self.task.turn_limit:
            self.task.finish(0.0, status=SampleStatus.TASK_LIMIT_REACHED)
        tools = self._changed_tools()
        if self.finished:
            await self.close()
        return self.output(new, tools)

    async def _dispatch(self, assistant: list[Message], new: list[dict[str, Any]]) -> bool:
        """The SDK's answer to an assistant message: run its tool calls in order (or answer its
        text with :meth:`Task.on_text`), appending to ``new``. False once the task failed."""
        calls = [c for m in assistant for c in (m.tool_calls or [])]
        if not calls:
            text = "\n".join(m.text() for m in assistant)
            try:
                reply = await self.task.on_text(text)
            except ToolCallError as e:
                reply = f"Error: {e.message}"
            except Exception as e:  # the task's own fault
                await self._fail(e, "on_text")
                return False
            if reply is not None:
                new.append({"role": "user", "content": reply})
        for call in calls:
            try:
                content = await self._run_tool(call)
            except ToolCallError as e:
                self.tool_errors += 1
                content = f"Error: {e.message}"
            except Exception as e:  # the task's own fault
                await self._fail(e, f"tool {call.function.name!r}")
                return False
            new.append(tool_message(call.id, content))
            if self.finished:
                break
        return True

    def _changed_tools(self) -> list[dict[str, Any]] | None:
        """The session's tools if this step changed them (sent with the step), else ``None``."""
        current = self.task.session_tools()
        if current == self._tools:
            return None
        self._tools = current
        return current

    async def _run_tool(self, call: ToolCall) -> str:
        specs = type(self.task).tool_specs()
        spec = specs.get(call.function.name)
        if spec is None:
            known = ", ".join(f"`{n}`" for n in specs)
            raise ToolCallError(f"unknown tool `{call.function.name}`; the tools are {known}")
        raw = _decode_arguments(spec.name, call.function.arguments or "{}")
        kwargs = spec.validate(raw)
        method = getattr(self.task, spec.method_name)
        result = await method(**kwargs) if spec.is_async else await asyncio.to_thread(method, **kwargs)
        return "" if result is None else str(result)

    async def _fail(self, exc: BaseException, where: str) -> None:
        log.exception("task %r failed in %s", type(self.task).name, where, exc_info=exc)
        await self.abort(f"{where}: {type(exc).__name__}: {exc}")

    async def abort(self, why: str) -> EnvOutput:
        """End the episode as ``task error`` (not the model's fault) and release it."""
        if not self.finished:
            self.task.finish(0.0, status=SampleStatus.TASK_ERROR, error=why)
        await self.close()
        return self.output([])

    async def close(self) -> None:
        """Tear the session down (idempotent); a cancelled running episode ends as ``cancelled``."""
        if self.closed:
            return
        self.closed = True
        if not self.task.done:
            self.task.finish(0.0, status=SampleStatus.CANCELLED)
        try:
            await self.task.teardown()
        except Exception:
            log.exception("teardown of task %r failed", type(self.task).name)


def _decode_arguments(tool: str, text: str) -> dict[str, Any]:
    """A tool call's arguments as a dict, or :class:`ToolCallError` (the model's mistake) saying why
    not. Beyond what ``json.loads`` rejects, these raised *other* errors, which ended the episode
    ``task error`` (probed on every task): nesting past the recursion limit (``RecursionError``),
    an integer of more digits than ``sys.get_int_max_str_digits()`` (``ValueError``), and a lone
    surrogate escape (``"\\udc80"``, which Python decodes and no task can encode: UTF-8, orjson)."""
    why = f"the arguments of `{tool}` are not valid JSON"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolCallError(f"{why} ({e.msg} at position {e.pos})") from None
    except RecursionError:
        raise ToolCallError(f"{why} (nested too deeply)") from None
    except ValueError:
        raise ToolCallError(f"{why} (an integer of more than {sys.get_int_max_str_digits()} digits)") from None
    if not isinstance(raw, dict):
        raise ToolCallError(f"the arguments of `{tool}` must be a JSON object, got {type(raw).__name__}")
    try:
        json.dumps(raw, ensure_ascii=False).encode()
    except UnicodeEncodeError as e:
        raise ToolCallError(f"{why} (a lone surrogate \\u{ord(e.object[e.start]):04x} in a string)") from None
    return raw


class TaskRuntime:
    """One task loaded for serving: its class, config, samples and shared resources."""

    def __init__(
        self,
        task_cls: type[Task],
        *,
        split: str | None = None,
        data: str | Path | None = None,
        config: BaseModel | dict[str, Any] | None = None,
    ) -> None:
        self.task_cls = task_cls
        self.split = split
        if isinstance(config, task_cls.Config):
            self.config = config
        else:
            try:
                self.config = task_cls.Config.model_validate(config or {})
            except ValidationError as e:
                raise DataError(f"invalid options for task {task_cls.name!r}: {e}") from None
        if split is not None and data is None and split not in task_cls.splits:
            raise DataError(f"task {task_cls.name!r} has no split {split!r}; its splits are {list(task_cls.splits)}")
        self.samples = task_cls.load_samples(split=split, data=data)
        self.resources: Any = None
        self._opened = False

    @property
    def name(self) -> str:
        return self.task_cls.name

    @property
    def indices(self) -> list[int]:
        return list(range(len(self.samples)))

    async def open(self) -> None:
        if not self._opened:
            self.resources = await self.task_cls.open_resources(self.config)
            self._opened = True

    async def close(self) -> None:
        if self._opened:
            self._opened = False
            await self.task_cls.close_resources(self.resources)

    def sample(self, index: SampleIndex, custom_task: dict[str, Any] | None = None) -> dict[str, Any]:
        if index == -1 and custom_task is not None:
            return self.task_cls.sample_from_custom(custom_task)
        if isinstance(index, str) and index.lstrip("-").isdigit():
            index = int(index)
        if not isinstance(index, int) or not 0 <= index < len(self.samples):
            raise UnknownSampleError(
                f"task {self.name!r} has no sample {index!r} (indices 0..{len(self.samples) - 1})", index=index
            )
        return self.samples[index]

    def episode(self, index: SampleIndex, custom_task: dict[str, Any] | None = None) -> Episode:
        sample = self.sample(index, custom_task)
        return Episode(self.task_cls(sample, config=self.config, resources=self.resources), index=index)


def _wire_message(m: Any) -> dict[str, Any]:
    """An opening message as the wire carries it. An assistant message keeps its ``content`` key
    even when it only calls tools (``null``): OpenAI always sends it, and clients index it
    (agentrl-eval's Responses converter reads ``message["content"]``)."""
    d = Message.model_validate(m).model_dump(mode="json", exclude_none=True)
    if d["role"] == "assistant":
        d.setdefault("content", None)
    return d
