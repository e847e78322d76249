"""Sandboxes: isolated places where a task session runs shell commands.

The interface is backend-neutral (:mod:`.base`); backends are bubblewrap (:mod:`.bwrap`, no daemon,
a read-only Debian root filesystem built by :mod:`.rootfs`) and Docker (:mod:`.docker`).
"""

from __future__ import annotations

from .base import CommandResult, Sandbox, SandboxBackend, SandboxError, SandboxLimits, SandboxStoppedError

__all__ = ["CommandResult", "Sandbox", "SandboxBackend", "SandboxError", "SandboxLimits", "SandboxStoppedError"]
