"""AgentBench's OS-interaction task for agentrl-envs (task name ``os``)."""

from __future__ import annotations

from .task import OSConfig, OSTask

__all__ = ["OSConfig", "OSTask"]
