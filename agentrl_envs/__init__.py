"""agentrl-envs: multi-turn, tool-calling tasks behind one AgentRL-compatible controller."""

from __future__ import annotations

from .episode import Episode, TaskRuntime
from .registry import get_task, task_names
from .schema import SampleStatus
from .task import Task, tool

__version__ = "0.1.0"

__all__ = ["Episode", "SampleStatus", "Task", "TaskRuntime", "get_task", "make", "task_names", "tool", "__version__"]


def make(task: str, **kwargs):
    """Create a gymnasium env for ``task`` (in-process, or through ``controller=URL``)."""
    from .gym_env import make as _make

    return _make(task, **kwargs)
