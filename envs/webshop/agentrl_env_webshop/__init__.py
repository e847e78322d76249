"""agentrl-env-webshop: WebShop (AgentBench's FC webshop task) for agentrl-envs.

Registered as task ``webshop`` (entry point ``agentrl_envs.tasks``); see ``README.md``.
"""

from __future__ import annotations

from .task import WebShopConfig, WebShopTask

__all__ = ["WebShopConfig", "WebShopTask"]
