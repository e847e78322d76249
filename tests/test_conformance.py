"""The conformance suite (agentrl_envs.conformance) over every installed task: no per-task test code.

One test per (task, check). The os task needs its sandbox (bubblewrap + the Debian rootfs at
$AGENTRL_ROOTFS or ~/.cache/agentrl-envs/rootfs/debian-*): without it its tests skip, and
under CI=true they fail instead. What a check reports without failing (samples without a
reference, a round limit lowered to be played) comes out as a warning.
"""

from __future__ import annotations

import os
import warnings

import pytest

import agentrl_envs
from agentrl_envs.conformance import CHECKS, ConformanceSkip


def require_runnable(task: str) -> None:
    """The os task needs its sandbox (bubblewrap + rootfs): skip without it, fail under CI."""
    if task != "os":
        return
    from agentrl_envs.sandbox.bwrap import missing_requirements
    from agentrl_envs.sandbox.rootfs import default_rootfs_path

    problem = missing_requirements(default_rootfs_path())
    if problem:
        hint = ' (run: eval "$(sudo .ci/os-sandbox.sh | tail -n1)")'
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem + hint)
        pytest.skip(problem + hint)


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("task", agentrl_envs.task_names())
def test_conformance(task, check):
    require_runnable(task)
    try:
        notes = CHECKS[check](agentrl_envs.get_task(task))
    except ConformanceSkip as e:
        pytest.skip(str(e))
    for note in notes:
        print(f"{task} {check}: {note}")
        warnings.warn(f"conformance {task} {check}: {note}", stacklevel=1)
