"""The tool-schema check (in-process), and the rules on a list of tool definitions that the wire
check applies too (:func:`tool_list_problems`)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from ..task import Task
from .common import ConformanceSkip, split_of, task_label
from .sessions import episode_of, open_runtime, start

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def check_tool_schemas(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """Every ``tool_definitions()`` entry is an OpenAI function tool with a valid JSON Schema; for
    a task whose tools are per session (:meth:`Task.session_tools`), the tools a session of its
    first sample starts with."""
    who = f"task {task_cls.name!r}"
    assert isinstance(task_cls.name, str) and task_cls.name, f"{who}: expected a non-empty class attribute `name`"
    tools = task_cls.tool_definitions()
    if not tools and has_session_tools(task_cls):
        split = split_of(task_cls, split)
        who, tools = f"{task_label(task_cls, split)}, sample 0", asyncio.run(first_session_tools(task_cls, split, config))
    assert isinstance(tools, list) and tools, f"{who}: expected at least one @tool method, got tool_definitions() = {tools!r}"
    check_tool_list(tools, who)
    return []


def has_session_tools(task_cls: type[Task]) -> bool:
    """Whether the task gives each session its own tools (overrides :meth:`Task.session_tools`)."""
    return task_cls.session_tools is not Task.session_tools


async def first_session_tools(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[dict[str, Any]]:
    async with open_runtime(task_cls, split, config) as runtime:
        episode = episode_of(runtime, 0)
        try:
            await start(episode, task_label(task_cls, split))
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
