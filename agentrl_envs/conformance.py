"""The conformance suite: what every task must do, checked on any task class without task-specific test code.

Run it on your own task, installed or not::

    from agentrl_envs.conformance import check_task_conformance
    check_task_conformance(MyTask)        # raises AssertionError listing every failed check

or one check per test, as the ``tests/test_NAME.py`` written by ``agentrl-envs new NAME`` does::

    @pytest.mark.parametrize("check", CHECKS)
    def test_conformance(check):
        try:
            CHECKS[check](MyTask)
        except ConformanceSkip as e:
            pytest.skip(str(e))

Every check takes the task class, a split (default: ``"dev"`` if the task has it, else its first)
and ``config`` (the task's options, as ``--option``). It raises :class:`AssertionError` saying
what was expected and what came, :class:`ConformanceSkip` (with the reason) when it cannot apply,
and returns *notes*: what it reports without failing.

``tool_schemas``
    ``tool_definitions()`` is a non-empty list of OpenAI function tools (``type: function``, a
    name of ``[a-zA-Z0-9_-]{1,64}``, unique, a description, every parameter described) whose
    ``parameters`` is an object schema valid under JSON Schema Draft 2020-12 (needs
    ``jsonschema``: ``pip install 'agentrl-envs[test]'``).
``bad_calls``
    In one session: an unknown tool, invalid JSON arguments, a missing required argument and a
    message without a tool call each come back as a tool (or user) message, not an exception
    nor the end of the episode, and each counts as a round.
``turn_limit``
    A session whose every message calls no tool ends ``task limit reached`` (reward 0) after
    exactly its round limit. A limit above :data:`MAX_PLAYED_TURNS` (echo's is 1,000,000) is
    lowered to 3 the documented way (:meth:`Task.resolve_turn_limit`): the ``max_turns`` option
    if the task's ``Config`` has one, else a sample's ``max_turns``; a task that takes neither is
    skipped with the reason.
``teardown``
    On a worker service (:class:`~agentrl_envs.worker.WorkerService`, no HTTP): a session that the
    task ends, one the client cancels and one still running when the worker shuts down each run
    ``teardown`` exactly once (the class's ``setup``/``teardown`` are wrapped to count), the
    worker holds no session afterwards and :meth:`TaskRuntime.close` works (twice).
``gym_env``
    gymnasium's ``check_env`` on ``agentrl_envs.make(task, split=...)``.
``reference_replay``
    Every sample of the split that has a reference (:meth:`Task.reference_policy`) is replayed by
    :func:`agentrl_envs.check.check_task` through a real controller and worker over HTTP and must
    end ``completed`` with reward 1; afterwards neither holds a session of the task. For a task
    installed under its name (entry-point group ``agentrl_envs.tasks``) they are a
    :class:`~agentrl_envs.stack.LocalStack` (separate processes, as ``agentrl-envs check``); for a
    class that is not installed (a package being written), the same controller and worker
    services in threads of this process. ``reference_policy`` returning ``None`` is how a task
    says a sample has no known solution: such samples are reported (a note), not failed, unless
    ``require_all_references=True``; but the task must define ``reference_policy`` and at least
    one sample of the split must have a reference.

The checks are synchronous (each runs its own event loop); call them from plain code or sync tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from typing import Any

import httpx

from .agent import AgentSession, MaxTurns, run_episode
from .episode import Episode, TaskRuntime
from .errors import InfrastructureError, SessionFinishedError, UnknownSessionError
from .policy import as_policy
from .protocol.agentrl import InteractResponse, SampleStatus, interact_response, start_response
from .task import Task

__all__ = [
    "CHECKS",
    "MAX_PLAYED_TURNS",
    "NO_CALL",
    "BadCall",
    "ConformanceSkip",
    "bad_call_cases",
    "check_bad_calls",
    "check_gym_env",
    "check_reference_replay",
    "check_task_conformance",
    "check_teardown",
    "check_tool_list",
    "check_tool_schemas",
    "check_turn_limit",
    "default_split",
    "has_session_tools",
    "shorten",
    "temporarily_registered",
    "tool_list_problems",
]

#: The turn-limit check plays at most this many rounds; a longer limit is lowered to 3 for it.
MAX_PLAYED_TURNS = 20
_LOWERED_LIMIT = 3
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_UNKNOWN_TOOL = "conformance_no_such_tool"
#: The assistant message of a round without a tool call.
NO_CALL = {"role": "assistant", "content": "I will not call a tool this time."}


class ConformanceSkip(Exception):
    """A check that cannot apply to this task; the message says why."""


def default_split(task_cls: type[Task]) -> str | None:
    """``"dev"`` if the task ships it, else its first split (``None`` if it names none)."""
    return "dev" if "dev" in task_cls.splits else (task_cls.splits[0] if task_cls.splits else None)


def _split(task_cls: type[Task], split: str | None) -> str | None:
    return split if split is not None else default_split(task_cls)


def shorten(text: object, limit: int = 400) -> str:
    """One line; a long text keeps its head and its tail (where a traceback says what failed)."""
    flat = " | ".join(line.strip() for line in str(text).splitlines() if line.strip())
    return flat if len(flat) <= limit else f"{flat[: limit // 2]} ... {flat[-limit // 2 :]}"


def _what(task_cls: type[Task], split: str | None) -> str:
    return f"task {task_cls.name!r}" + (f" (split {split!r})" if split else "")


# --------------------------------------------------------------------------- tool schemas


def check_tool_schemas(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """Every ``tool_definitions()`` entry is an OpenAI function tool with a valid JSON Schema; for
    a task whose tools are per session (:meth:`Task.session_tools`), the tools a session of its
    first sample starts with."""
    who = f"task {task_cls.name!r}"
    assert isinstance(task_cls.name, str) and task_cls.name, f"{who}: expected a non-empty class attribute `name`"
    tools = task_cls.tool_definitions()
    if not tools and has_session_tools(task_cls):
        split = _split(task_cls, split)
        who, tools = f"{_what(task_cls, split)}, sample 0", asyncio.run(_first_session_tools(task_cls, split, config))
    assert isinstance(tools, list) and tools, f"{who}: expected at least one @tool method, got tool_definitions() = {tools!r}"
    check_tool_list(tools, who)
    return []


def has_session_tools(task_cls: type[Task]) -> bool:
    """Whether the task gives each session its own tools (overrides :meth:`Task.session_tools`)."""
    return task_cls.session_tools is not Task.session_tools


async def _first_session_tools(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[dict[str, Any]]:
    async with _runtime(task_cls, split, config) as runtime:
        episode = _episode(runtime, 0)
        try:
            await _start(episode, _what(task_cls, split))
            return episode.task.session_tools()
        finally:
            await episode.close()


def check_tool_list(tools: list[Any], who: str) -> None:
    """The tool-schema rules on a list of tool definitions (a task's): raises
    :class:`AssertionError` naming ``who`` and the tool that breaks one, errors and advice alike
    (our own tasks follow both; see :func:`tool_list_problems`)."""
    for _, problem in tool_list_problems(tools, who):
        raise AssertionError(problem)


#: A problem :func:`tool_list_problems` finds: ``"error"`` (OpenAI's API or JSON Schema refuses the
#: definition) or ``"advice"`` (valid, but the model is told less than it could be).
ToolProblem = tuple[str, str]


def tool_list_problems(tools: list[Any], who: str) -> list[ToolProblem]:
    """Every problem of a list of tool definitions, in order, each ``(kind, message)``.

    Errors: not an OpenAI function tool, a name outside ``[a-zA-Z0-9_-]{1,64}``, a name twice,
    ``parameters`` present but not an object schema valid under JSON Schema Draft 2020-12, a
    definition that is not JSON. Advice: no description of the function or of an argument, no
    ``parameters``, a required argument that ``properties`` does not define (OpenAI's schema asks
    for none of these). A tool whose structure is broken is not looked into further."""
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
    except ImportError as e:  # pragma: no cover - jsonschema is in the [test] extra
        raise ConformanceSkip(f"the tool-schema check needs jsonschema (pip install 'agentrl-envs[test]'): {e}") from None

    problems: list[ToolProblem] = []
    seen: set[str] = set()
    for i, entry in enumerate(tools):
        where = f"{who}, tool #{i}"
        if not (isinstance(entry, dict) and entry.get("type") == "function"):
            problems.append(
                ("error", f"{where}: expected an OpenAI tool {{'type': 'function', 'function': {{...}}}}, got {entry!r}")
            )
            continue
        fn = entry.get("function")
        if not isinstance(fn, dict):
            problems.append(("error", f"{where}: expected a dict under 'function', got {fn!r}"))
            continue
        name = fn.get("name")
        if not (isinstance(name, str) and _TOOL_NAME.fullmatch(name)):
            problems.append(
                ("error", f"{where}: expected a function name of 1-64 letters, digits, '_' or '-' (OpenAI's rule), got {name!r}")
            )
            continue
        where = f"{who}, tool {name!r}"
        if name in seen:
            problems.append(("error", f"{where}: expected unique tool names, got {name!r} twice"))
            continue
        seen.add(name)
        if not (isinstance(fn.get("description"), str) and fn["description"].strip()):
            problems.append(
                (
                    "advice",
                    f"{where}: expected a non-empty description (the docstring's first paragraph), got {fn.get('description')!r}",
                )
            )
        params = fn.get("parameters")
        if params is None:
            problems.append(("advice", f"{where}: expected 'parameters' to be a JSON Schema of type 'object', got None"))
        elif not (isinstance(params, dict) and params.get("type") == "object"):
            problems.append(("error", f"{where}: expected 'parameters' to be a JSON Schema of type 'object', got {params!r}"))
            continue
        else:
            try:
                Draft202012Validator.check_schema(params)
            except SchemaError as e:
                problems.append(("error", f"{where}: 'parameters' is not valid JSON Schema (Draft 2020-12): {e.message}"))
                continue
            props = params.get("properties", {})
            if not isinstance(props, dict):  # pragma: no cover - check_schema refuses it first
                problems.append(("error", f"{where}: expected 'properties' to be an object, got {props!r}"))
                continue
            missing = [r for r in params.get("required", []) if r not in props]
            if missing:
                problems.append(
                    (
                        "advice",
                        f"{where}: expected every required argument among the properties, got required {missing} undefined",
                    )
                )
            undescribed = [p for p, s in props.items() if not (isinstance(s, dict) and str(s.get("description") or "").strip())]
            if undescribed:
                problems.append(
                    (
                        "advice",
                        f"{where}: expected a description for every argument (the docstring's `Args:` section),"
                        f" got none for {undescribed}",
                    )
                )
        try:
            json.dumps(entry)
        except (TypeError, ValueError) as e:
            problems.append(("error", f"{where}: expected a JSON-serializable definition, got {e}"))
    return problems


# --------------------------------------------------------------------------- in-process sessions


@contextlib.asynccontextmanager
async def _runtime(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> Any:
    runtime = TaskRuntime(task_cls, split=split, config=config)
    await runtime.open()
    try:
        yield runtime
    finally:
        await runtime.close()


def _episode(runtime: TaskRuntime, index: int, max_turns: int | None = None) -> Episode:
    """An episode of sample ``index``; with ``max_turns`` its sample carries that ``max_turns``."""
    sample = runtime.sample(index)
    if max_turns is not None:
        sample = {**sample, "max_turns": max_turns}
    return Episode(runtime.task_cls(sample, config=runtime.config, resources=runtime.resources), index=index)


def _ended(out: Any) -> str:
    why = out.metric.get("error") if isinstance(out.metric, dict) else None
    return f"status {out.status.value!r}, reward {out.reward}" + (f", error: {shorten(why)}" if why else "")


async def _start(episode: Episode, who: str) -> list[dict[str, Any]]:
    out = await episode.start()
    assert not out.finish, f"{who}: expected sample {episode.index} to start, got the episode ended at setup ({_ended(out)})"
    return out.messages


def _call_message(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


#: One bad-call case: (what, the assistant message, the role the answer must have, a text it must mention).
BadCall = tuple[str, dict[str, Any], str, str | None]


def bad_call_cases(tools: list[dict[str, Any]]) -> tuple[list[BadCall], list[str]]:
    """The model mistakes the ``bad_calls`` check sends, for these tools, and notes on the cases
    that do not apply: an unknown tool, invalid JSON arguments, a missing required argument (if
    a tool has one) and a message without a tool call."""
    first = tools[0]["function"]["name"]
    with_required = next((t["function"] for t in tools if t["function"].get("parameters", {}).get("required")), None)
    notes: list[str] = []
    cases: list[BadCall] = [
        ("an unknown tool", _call_message("c_unknown", _UNKNOWN_TOOL, "{}"), "tool", _UNKNOWN_TOOL),
        ("invalid JSON arguments", _call_message("c_json", first, '{"oops": '), "tool", "JSON"),
    ]
    if with_required is not None:
        arg = with_required["parameters"]["required"][0]
        cases.append(("a missing required argument", _call_message("c_missing", with_required["name"], "{}"), "tool", arg))
    else:
        notes.append("no tool has a required argument: the missing-argument case does not apply")
    cases.append(("a message without a tool call", dict(NO_CALL), "user", None))
    return cases, notes


def check_bad_calls(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """Model mistakes are answered with a tool/user message, the round counts, the episode goes on."""
    split = _split(task_cls, split)
    return asyncio.run(_bad_calls(task_cls, split, config))


async def _bad_calls(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[str]:
    who = _what(task_cls, split)
    tools = await _first_session_tools(task_cls, split, config) if has_session_tools(task_cls) else task_cls.tool_definitions()
    assert tools, f"{who}: expected at least one tool"
    cases, notes = bad_call_cases(tools)

    async with _runtime(task_cls, split, config) as runtime:
        assert runtime.indices, f"{who}: expected samples, got none"
        limit = task_cls.resolve_turn_limit(runtime.sample(0), runtime.config)
        episode = _episode(runtime, 0, max_turns=len(cases) + 1 if limit <= len(cases) else None)
        if episode.task.turn_limit <= len(cases):
            raise ConformanceSkip(f"{who}: the round limit {episode.task.turn_limit} is too short for {len(cases)} bad calls")
        try:
            await _start(episode, who)
            errors_before = 0
            for turn, (what, message, role, mention) in enumerate(cases, start=1):
                where = f"{who}, sample 0, round {turn} ({what})"
                try:
                    out = await episode.step([message])
                except Exception as e:
                    raise AssertionError(f"{where}: expected a {role} message back, got {type(e).__name__}: {e}") from e
                assert not out.finish, f"{where}: expected the episode to go on, got it ended ({_ended(out)})"
                # One message back; a task that follows another harness's turn rules (BFCL ends a
                # user turn on an undecodable or text reply) may follow it with the next user turn.
                extra = out.messages[1:]
                assert out.messages and all(m.get("role") == "user" for m in extra), (
                    f"{where}: expected one {role} message back (then at most user messages), got {out.messages!r}"
                )
                answer = out.messages[0]
                assert answer.get("role") == role, f"{where}: expected a {role} message back, got {answer!r}"
                content = answer.get("content")
                assert isinstance(content, str) and content.strip(), f"{where}: expected a readable text, got {content!r}"
                if role == "tool":
                    call_id = message["tool_calls"][0]["id"]
                    assert answer.get("tool_call_id") == call_id, (
                        f"{where}: expected the answer to carry tool_call_id {call_id!r}, got {answer.get('tool_call_id')!r}"
                    )
                    errors = out.metric.get("tool_errors")
                    assert errors == errors_before + 1, (
                        f"{where}: expected the tool_errors metric to grow to {errors_before + 1}, got {errors}"
                    )
                    errors_before = errors
                if mention is not None:
                    assert mention in content, f"{where}: expected the answer to mention {mention!r}, got {content!r}"
                assert out.metric.get("turns") == turn, (
                    f"{where}: expected the round to count (turns = {turn}), got turns = {out.metric.get('turns')!r}"
                )
        finally:
            await episode.close()
    return notes


# --------------------------------------------------------------------------- round limit


def check_turn_limit(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """A session that never calls a tool ends ``task limit reached`` after exactly its round limit."""
    split = _split(task_cls, split)
    return asyncio.run(_turn_limit(task_cls, split, config))


async def _turn_limit(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[str]:
    who = _what(task_cls, split)
    notes: list[str] = []
    base = TaskRuntime(task_cls, split=split, config=config)
    assert base.indices, f"{who}: expected samples, got none"
    natural = task_cls.resolve_turn_limit(base.sample(0), base.config)
    expected, options, sample_limit = natural, dict(config or {}), None
    if natural > MAX_PLAYED_TURNS:
        if "max_turns" in task_cls.Config.model_fields and options.get("max_turns") is None:
            options["max_turns"], how = _LOWERED_LIMIT, f"the option max_turns={_LOWERED_LIMIT}"
        else:
            sample_limit, how = _LOWERED_LIMIT, f"a sample with max_turns {_LOWERED_LIMIT}"
        expected = _LOWERED_LIMIT
        notes.append(f"the round limit {natural} is too long to play: checked with {how}")

    async with _runtime(task_cls, split, options) as runtime:
        episode = _episode(runtime, 0, max_turns=sample_limit)
        if episode.task.turn_limit != expected:
            if natural > MAX_PLAYED_TURNS:
                raise ConformanceSkip(
                    f"{who}: its round limit {natural} is above {MAX_PLAYED_TURNS} and neither a max_turns option nor a"
                    f" sample's max_turns lowers it (got {episode.task.turn_limit})"
                )
            raise AssertionError(
                f"{who}: expected the session's turn_limit to be {expected} (Task.resolve_turn_limit), got {episode.task.turn_limit}"
            )
        try:
            await _start(episode, who)
            for turn in range(1, expected + 1):
                where = f"{who}, sample 0, round {turn} of {expected} without a tool call"
                try:
                    out = await episode.step([dict(NO_CALL)])
                except Exception as e:
                    raise AssertionError(f"{where}: expected an answer, got {type(e).__name__}: {e}") from e
                assert [m.get("role") for m in out.messages] == ["user"], (
                    f"{where}: expected one user message back, got {out.messages!r}"
                )
                if turn < expected:
                    assert not out.finish, f"{where}: expected the episode to go on, got it ended ({_ended(out)})"
                else:
                    assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0.0, (
                        f"{where}: expected the episode to end with status 'task limit reached', reward 0; got "
                        + (_ended(out) if out.finish else "it still running")
                    )
                    assert out.metric.get("turns") == expected, (
                        f"{where}: expected metrics turns = {expected}, got {out.metric.get('turns')!r}"
                    )
            try:
                await episode.step([dict(NO_CALL)])
            except SessionFinishedError:
                pass
            else:
                raise AssertionError(f"{who}: expected a step after the limit to raise SessionFinishedError, it was accepted")
        finally:
            await episode.close()
    return notes


# --------------------------------------------------------------------------- teardown


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
    split = _split(task_cls, split)
    with _Lifecycle(task_cls) as counts:
        notes = asyncio.run(_teardown(task_cls, split, config, counts))
    problems = counts.problems()
    assert not problems, f"{_what(task_cls, split)}: expected teardown exactly once per session, got: " + "; ".join(problems)
    return notes


async def _teardown(task_cls: type[Task], split: str | None, config: dict[str, Any] | None, counts: _Lifecycle) -> list[str]:
    from .worker import WorkerService

    who = _what(task_cls, split)
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


# --------------------------------------------------------------------------- gymnasium


@contextlib.contextmanager
def temporarily_registered(task_cls: type[Task]) -> Iterator[None]:
    """Make ``agentrl_envs.get_task(task_cls.name)`` return ``task_cls`` in this process for a while
    (for a class that is not installed); a no-op when it is installed under its name."""
    from . import registry

    if _installed(task_cls):
        yield
        return
    eps = registry._entry_points()
    name = task_cls.name
    previous = eps.get(name)
    loader = type("_ClassEntryPoint", (EntryPoint,), {"load": lambda self: task_cls})
    eps[name] = loader(name, f"{task_cls.__module__}:{task_cls.__qualname__}", registry.GROUP)
    try:
        yield
    finally:
        if previous is None:
            eps.pop(name, None)
        else:
            eps[name] = previous


def check_gym_env(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """gymnasium's ``check_env`` on the task's env, made through its spec ``agentrl/<task>-v0``
    (so the render modes are checked too); reset's observation holds the task's tools."""
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    split = _split(task_cls, split)
    who = _what(task_cls, split)
    env_id = f"agentrl/{task_cls.name}-v0"
    with temporarily_registered(task_cls):
        added = env_id not in gym.registry
        if added:
            gym.register(
                env_id,
                entry_point="agentrl_envs.integrations.gym:AgentEnv",
                kwargs={"task": task_cls.name},
                disable_env_checker=True,
            )
        try:
            env = gym.make(env_id, split=split, options=config)
            try:
                try:
                    check_env(env.unwrapped)
                except Exception as e:
                    raise AssertionError(
                        f"{who}: expected gymnasium's check_env to pass, got {type(e).__name__}: {shorten(e)}"
                    ) from e
                obs, info = env.reset(options={"index": 0})
                assert obs in env.observation_space, f"{who}: expected reset's observation in the space, got {obs!r}"
                if has_session_tools(task_cls):
                    expected = asyncio.run(_first_session_tools(task_cls, split, config))
                    assert obs["tools"] == expected, f"{who}: expected reset's tools to be sample 0's, got {obs['tools']!r}"
                else:
                    assert obs["tools"] == task_cls.tool_definitions(), (
                        f"{who}: expected reset's tools to be tool_definitions(), got {obs['tools']!r}"
                    )
            finally:
                env.close()
        finally:
            if added:
                del gym.registry[env_id]
    return []


# --------------------------------------------------------------------------- reference replay


@contextlib.contextmanager
def _threaded_stack(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> Iterator[str]:
    """A controller and a worker of ``task_cls`` (any class, installed or not) over loopback HTTP, in threads."""
    from .controller import ControllerService, create_controller_app
    from .stack import ServerThread, free_port, tasks_without_live_worker
    from .worker import WorkerService, create_worker_app

    controller = ServerThread(create_controller_app(ControllerService())).start()
    worker: ServerThread | None = None
    try:
        port = free_port()
        runtime = TaskRuntime(task_cls, split=split, config=config)
        service = WorkerService(runtime, controller_url=controller.url, self_address=f"http://127.0.0.1:{port}/api")
        worker = ServerThread(create_worker_app(service), port=port).start()
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2.0) as http:
            while tasks_without_live_worker(http, controller.url, [task_cls.name]):
                if time.monotonic() > deadline:
                    raise InfrastructureError(f"the worker of {task_cls.name!r} did not register with the controller")
                time.sleep(0.05)
        yield controller.url
    finally:
        if worker is not None:
            worker.stop()
        controller.stop()


def _installed(task_cls: type[Task]) -> bool:
    from .registry import get_task

    try:
        return get_task(task_cls.name) is task_cls
    except Exception:
        return False


def _sessions_left(url: str, task: str) -> dict[str, Any]:
    """Sessions of ``task`` the controller and its workers still hold."""
    with httpx.Client(timeout=5.0) as http:
        left: dict[str, Any] = {}
        on_controller = [s for s in http.get(f"{url}/api/list_sessions").json() if s.get("name") == task]
        if on_controller:
            left["controller"] = on_controller
        for w in http.get(f"{url}/api/list_workers").json().get(task, []):
            if w.get("alive"):
                held = http.get(f"{w['address'].rstrip('/')}/get_sessions").json()
                if held:
                    left[w["address"]] = held
        return left


def check_reference_replay(
    task_cls: type[Task],
    split: str | None = None,
    *,
    config: dict[str, Any] | None = None,
    controller_url: str | None = None,
    require_all_references: bool = False,
    concurrency: int = 8,
) -> list[str]:
    """Replay every reference of the split through a controller and a worker: all must score 1.

    ``controller_url``: a running controller already serving this task (same split and options);
    else one is started (see the module docstring)."""
    from .check import check_task
    from .stack import LocalStack

    split = _split(task_cls, split)
    who = _what(task_cls, split)
    assert getattr(task_cls.reference_policy, "__func__", None) is not getattr(Task.reference_policy, "__func__", None), (
        f"{who}: expected a reference_policy (how to solve a sample; `agentrl-envs check` replays it), got Task's default"
    )

    def replay(url: str) -> Any:
        report = asyncio.run(check_task(url, task_cls, split=split, concurrency=concurrency, progress=False))
        deadline = time.monotonic() + 10
        while (left := _sessions_left(url, task_cls.name)) and time.monotonic() < deadline:
            time.sleep(0.2)  # a cancel may still be on its way
        assert not left, f"{who}: expected no session left after the replay, got {left}"
        return report

    if controller_url is not None:
        report = replay(controller_url)
    elif _installed(task_cls):
        options = {task_cls.name: {k: v for k, v in (config or {}).items() if v is not None}}
        with LocalStack([task_cls.name], split=split, task_options=options) as stack:
            report = replay(stack.url)
    else:
        with _threaded_stack(task_cls, split, config) as url:
            report = replay(url)

    notes = []
    total = report.total + len(report.without_reference)
    if report.without_reference:
        missing = f"{len(report.without_reference)} of {total} samples have no reference: {report.without_reference}"
        assert not require_all_references, f"{who}: expected a reference for every sample, got {missing}"
        notes.append(f"{missing} (reference_policy returned None; not replayed)")
    assert report.total > 0, f"{who}: expected at least one sample with a reference, got none of {total}"
    failed = [s for s in report.samples if not s.solved]
    if failed:
        lines = [
            f"sample {s.index}: status {s.status!r}, reward {s.reward}, {s.turns} turns: {str(s.error)[:300]}"
            for s in failed[:10]
        ]
        more = f"; and {len(failed) - 10} more" if len(failed) > 10 else ""
        raise AssertionError(
            f"{who}: expected every reference replay to end 'completed' with reward 1, got {len(failed)} of {report.total}"
            " not solved:\n  " + "\n  ".join(lines) + more
        )
    return notes


# --------------------------------------------------------------------------- all of them

#: The checks by name, cheapest first; each ``check(task_cls, split=None, *, config=None) -> notes``.
CHECKS: dict[str, Callable[..., list[str]]] = {
    "tool_schemas": check_tool_schemas,
    "bad_calls": check_bad_calls,
    "turn_limit": check_turn_limit,
    "teardown": check_teardown,
    "gym_env": check_gym_env,
    "reference_replay": check_reference_replay,
}


def check_task_conformance(
    task_cls: type[Task],
    split: str | None = None,
    *,
    config: dict[str, Any] | None = None,
    checks: list[str] | None = None,
) -> dict[str, list[str]]:
    """Run ``checks`` (default: all of :data:`CHECKS`); return each one's notes (a skipped check:
    ``["skipped: why"]``). Raises one :class:`AssertionError` naming every check that failed."""
    results: dict[str, list[str]] = {}
    failures: list[str] = []
    for name in checks or list(CHECKS):
        try:
            results[name] = CHECKS[name](task_cls, split, config=config)
        except ConformanceSkip as e:
            results[name] = [f"skipped: {e}"]
        except AssertionError as e:
            failures.append(f"[{name}] {e}")
    if failures:
        raise AssertionError(f"task {task_cls.name!r} fails {len(failures)} conformance checks:\n" + "\n".join(failures))
    return results
