"""A worker serves one task over AgentRL's worker protocol."""

from .app import create_worker_app
from .service import WorkerService

__all__ = ["WorkerService", "create_worker_app"]
