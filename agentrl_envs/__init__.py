"""agentrl-envs: multi-turn, tool-calling tasks behind one AgentRL-compatible controller."""

from __future__ import annotations

from .episode import Episode, TaskRuntime
from .protocol.agentrl import SampleStatus
from .registry import get_task, register_all, task_names
from .task import Task, tool

__version__ = "0.1.0"

__all__ = ["Episode", "SampleStatus", "Task", "TaskRuntime", "get_task", "make", "task_names", "tool", "__version__"]


def make(task: str, **kwargs):
    """Create a gymnasium env for ``task`` (in-process, or through ``controller=URL``)."""
    from .integrations.gym import make as _make

    return _make(task, **kwargs)


# As gymnasium users expect: `import agentrl_envs` registers `agentrl/<task>-v0` for every installed
# task, so `gymnasium.make("agentrl/db-v0")` needs no other call.
register_all()
