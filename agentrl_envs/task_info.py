"""What the command lines read off an installed task: its options, split sizes and description.

Task options (``--option K=V``) may also come from the environment as ``AGENTRL_<TASK>_<K>``
(:func:`option_env_var`), e.g. ``AGENTRL_DB_BACKEND=mysql``; the command line wins.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from .errors import AgentRLEnvsError


def option_env_var(task: str, key: str) -> str:
    """The environment variable that sets option ``key`` of ``task``: ``AGENTRL_<TASK>_<KEY>``."""
    return f"AGENTRL_{task.upper().replace('-', '_')}_{key.upper()}"


def split_sizes(cls: Any) -> dict[str, Any]:
    """Samples per split of a task class; a split that fails to load shows its error."""
    sizes: dict[str, Any] = {}
    for split in cls.splits:
        try:
            sizes[split] = len(cls.load_samples(split=split))
        except Exception as e:  # a broken split must not hide the others
            sizes[split] = f"error: {e}"
    return sizes


def task_options(task: str, pairs: list[str] | None) -> dict[str, Any]:
    """Options for ``task`` from ``AGENTRL_<TASK>_<KEY>`` env vars, then ``K=V`` pairs."""
    from .integrations import task_class

    fields = task_class(task).Config.model_fields
    env = {k: option_env_var(task, k) for k in fields}
    options: dict[str, Any] = {k: os.environ[v] for k, v in env.items() if v in os.environ}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise AgentRLEnvsError(f"--option expects KEY=VALUE, got {pair!r}")
        if key not in fields:
            raise AgentRLEnvsError(f"task {task!r} has no option {key!r}; its options are {sorted(fields) or 'none'}")
        options[key] = value
    return options


def describe_task(name: str) -> dict[str, Any]:
    """What a user needs to run task ``name``: its splits and sizes, limits, tools and options."""
    from .registry import get_task

    cls = get_task(name)
    options = []
    for key, field in cls.Config.model_fields.items():
        kind = field.annotation.__name__ if isinstance(field.annotation, type) else str(field.annotation)
        options.append(
            {
                "name": key,
                "type": kind.replace("typing.", ""),
                "default": None if field.is_required() else field.get_default(call_default_factory=True),
                "required": field.is_required(),
                "description": field.description or "",
                "env": option_env_var(name, key),
            }
        )
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    return {
        "task": name,
        "module": cls.__module__,
        "summary": doc.split("\n\n")[0].replace("\n", " ").replace("``", "`"),
        "splits": split_sizes(cls),
        "max_turns": cls.max_turns,
        "concurrency": cls.concurrency,
        "tools": cls.tool_definitions(),
        "options": options,
    }
