"""agentrl-env-db: AgentBench's DB task (SQL over one sample's tables) for agentrl-envs.

Registered as task ``db`` (entry point ``agentrl_envs.tasks``); see ``README.md``.
"""

from __future__ import annotations

from .task import DBConfig, DBTask

__all__ = ["DBConfig", "DBTask"]
