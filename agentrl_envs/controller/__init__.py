"""The controller: one gateway, AgentRL's protocol, many workers."""

from .app import create_controller_app
from .service import ControllerService

__all__ = ["ControllerService", "create_controller_app"]
