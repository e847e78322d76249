"""The in-process ``gym_env`` check: gymnasium's ``check_env`` on the task's registered env."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from typing import Any

from ..task import Task
from .common import installed, shorten, split_of, task_label
from .tools import first_session_tools, has_session_tools


@contextlib.contextmanager
def temporarily_registered(task_cls: type[Task]) -> Iterator[None]:
    """Make ``agentrl_envs.get_task(task_cls.name)`` return ``task_cls`` in this process for a while
    (for a class that is not installed); a no-op when it is installed under its name."""
    from .. import registry

    if installed(task_cls):
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

    split = split_of(task_cls, split)
    who = task_label(task_cls, split)
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
                    expected = asyncio.run(first_session_tools(task_cls, split, config))
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
