"""Task registry: tasks are found through the entry-point group ``agentrl_envs.tasks``.

An installed package registers a task with, in its ``pyproject.toml``::

    [project.entry-points."agentrl_envs.tasks"]
    db = "agentrl_env_db:DBTask"
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points

from .errors import DataError
from .task import Task

GROUP = "agentrl_envs.tasks"


@cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def task_names() -> list[str]:
    """Names of every installed task, sorted."""
    return sorted(_entry_points())


def get_task(name: str) -> type[Task]:
    """Load the task class registered as ``name``; :class:`DataError` names the known ones."""
    ep = _entry_points().get(name)
    if ep is None:
        known = ", ".join(task_names()) or "none"
        raise DataError(f"unknown task {name!r}; installed tasks: {known} (a task registers in the entry-point group {GROUP!r})")
    cls = ep.load()
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise DataError(f"entry point {ep.value!r} for task {name!r} is not a Task subclass")
    return cls
