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


def register_all() -> list[str]:
    """Register ``agentrl/<task>-v0`` with gymnasium for every installed task (idempotent).

    ``import agentrl_envs`` calls it, so ``gymnasium.make("agentrl/db-v0")`` works at once; the
    env module itself is imported only when an env is made."""
    import gymnasium as gym

    ids = []
    for name in task_names():
        env_id = f"agentrl/{name}-v0"
        if env_id not in gym.registry:
            gym.register(
                env_id, entry_point="agentrl_envs.integrations.gym:AgentEnv", kwargs={"task": name}, disable_env_checker=True
            )
        ids.append(env_id)
    return ids
