"""agentrl-env-bfcl: the Berkeley Function Calling Leaderboard as task ``bfcl``, scored by BFCL's checkers."""

from __future__ import annotations

from .task import BFCLTask

__all__ = ["BFCLTask"]
