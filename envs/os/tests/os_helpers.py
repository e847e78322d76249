"""Helpers of the OS-task tests (not in conftest: conftest module names collide across folders,
so a test importing from ``conftest`` breaks when other folders are collected with it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentrl_envs.sandbox.bwrap import MARKER_ENV
from agentrl_envs.sandbox.bwrap_host import has_full_root, missing_requirements
from agentrl_envs.sandbox.rootfs import default_rootfs_path


def require_sandbox() -> Path:
    rootfs = default_rootfs_path()
    # As root: the root launch mode; else (the socket-free worker container) the userns mode.
    problem = missing_requirements(rootfs, userns=not has_full_root())
    if problem:
        hint = ' (run: eval "$(sudo .ci/os-sandbox.sh | tail -n1)")'
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem + hint)
        pytest.skip(problem + hint)
    return rootfs


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
