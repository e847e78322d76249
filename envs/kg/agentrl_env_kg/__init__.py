"""agentrl-env-kg: AgentBench's knowledge-graph task (graph tools over a SPARQL store) for agentrl-envs.

Registered as task ``kg`` (entry point ``agentrl_envs.tasks``); see ``README.md``.
"""

from __future__ import annotations

from .task import KGConfig, KGTask

__all__ = ["KGConfig", "KGTask"]
