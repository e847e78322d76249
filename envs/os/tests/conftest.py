"""OS-task test fixtures: real bubblewrap sandboxes over the built rootfs.

Tests that need them skip with the reason when bwrap/root/the rootfs are missing, and fail
instead when ``CI=true`` (CI must have run ``.ci/os-sandbox.sh``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentrl_envs.sandbox import SandboxLimits
from agentrl_envs.sandbox.bwrap import MARKER_ENV, BubblewrapBackend, missing_requirements
from agentrl_envs.sandbox.rootfs import default_rootfs_path


def require_sandbox() -> Path:
    rootfs = default_rootfs_path()
    problem = missing_requirements(rootfs)
    if problem:
        hint = ' (run: eval "$(sudo .ci/os-sandbox.sh | tail -n1)")'
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem + hint)
        pytest.skip(problem + hint)
    return rootfs


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


def sandbox_processes(prefix: str) -> list[int]:
    """Host pids whose environment carries the sandbox marker starting with ``prefix``."""
    needle = f"{MARKER_ENV}={prefix}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out
