"""Our tasks where people already train and share environments.

* :mod:`agentrl_envs.integrations.gym` — every task as a ``gymnasium.Env`` (``agentrl_envs.make``,
  ``gymnasium.make("agentrl/<task>-v0")``);
* :mod:`agentrl_envs.integrations.trl` — every task as an environment of TRL's
  ``GRPOTrainer(environment_factory=...)`` (docs/trl.md);
* :mod:`agentrl_envs.integrations.openenv` — every task served as an OpenEnv environment, and any
  OpenEnv environment run as a task behind our controller (docs/openenv.md).

Each module imports its framework lazily or at use, so importing this package needs neither.
"""

from __future__ import annotations

import importlib

from ..task import Task

#: Tasks the CLI knows without an entry point: adapters whose tools come from their options, so
#: they are not installed tasks (the conformance suite and image builds run over every installed one).
ADAPTERS = {"openenv": "agentrl_envs.integrations.openenv.task:OpenEnvTask"}


def task_class(name: str) -> type[Task]:
    """The installed task ``name``, else the adapter of that name (``openenv``)."""
    from ..registry import get_task, task_names

    if name not in task_names() and name in ADAPTERS:
        module, _, attr = ADAPTERS[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    return get_task(name)
