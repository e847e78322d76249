"""agentrl-trainer: async multi-turn RL for tool-using agents, on TRL.

The paper's three ideas, each in its own module: the async rollout/training pipeline
(:mod:`.pipeline`), lagging engines / cross-policy sampling (:mod:`.lagging`) and task advantage
normalization (:mod:`.advantages`). :class:`AgentRLTrainer` extends TRL's ``GRPOTrainer``;
:class:`AgentRLConfig` extends ``GRPOConfig``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["AgentRLConfig", "AgentRLTrainer"]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from .config import AgentRLConfig
    from .trainer import AgentRLTrainer


def __getattr__(name: str):  # the pure modules import without TRL
    if name == "AgentRLConfig":
        from .config import AgentRLConfig

        return AgentRLConfig
    if name == "AgentRLTrainer":
        from .trainer import AgentRLTrainer

        return AgentRLTrainer
    raise AttributeError(name)
