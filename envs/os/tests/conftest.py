"""OS-task test fixtures: real bubblewrap sandboxes over the built rootfs.

Tests that need them skip with the reason when bwrap/root/the rootfs are missing, and fail
instead when ``CI=true`` (CI must have run ``.ci/os-sandbox.sh``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from os_helpers import require_sandbox

from agentrl_envs.sandbox import SandboxLimits
from agentrl_envs.sandbox.bwrap import BubblewrapBackend


@pytest.fixture
def rootfs() -> Path:
    return require_sandbox()


@pytest.fixture
async def backend(rootfs: Path, tmp_path: Path) -> AsyncIterator[BubblewrapBackend]:
    b = BubblewrapBackend(rootfs, limits=SandboxLimits(memory_mb=256, pids=64, command_timeout_s=10), base_dir=tmp_path / "boxes")
    await b.open()
    try:
        yield b
    finally:
        await b.close()
