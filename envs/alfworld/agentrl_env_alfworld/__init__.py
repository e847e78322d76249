"""AgentBench's ALFWorld task for agentrl-envs, on ALFWorld's own text engine (see :mod:`.task`)."""

from .task import ALFWorldConfig, ALFWorldTask

__all__ = ["ALFWorldConfig", "ALFWorldTask"]
