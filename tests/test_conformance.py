"""The conformance suite (agentrl_envs.conformance) over every installed task: no per-task test code.

One test per (task, check) on the default split, and per (task, easy split, check) for the five
tasks' easy splits. The os task needs its sandbox (bubblewrap + the Debian rootfs at
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
    from agentrl_envs.sandbox.bwrap_host import missing_requirements
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


#: The small-model RL splits every one of the five tasks ships (issue 28): train, validation, test.
EASY_SPLITS = ("easy", "easy-val", "easy-test")
FIVE_TASKS = ("db", "os", "kg", "alfworld", "webshop")


def test_the_five_tasks_ship_the_easy_splits():
    for task in FIVE_TASKS:
        assert set(EASY_SPLITS) <= set(agentrl_envs.get_task(task).splits), task


def _easy_cases() -> list[tuple[str, str, str]]:
    """Every check on each task's ``easy-test``; the reference replay also on ``easy`` and
    ``easy-val`` (the other checks do not depend on which samples a split holds)."""
    cases = []
    for task in FIVE_TASKS:
        if task not in agentrl_envs.task_names():
            continue
        cases += [(task, "easy-test", check) for check in CHECKS]
        cases += [(task, split, "reference_replay") for split in ("easy", "easy-val")]
    return cases


@pytest.mark.parametrize(("task", "split", "check"), _easy_cases())
def test_conformance_on_the_easy_splits(task, split, check):
    require_runnable(task)
    try:
        notes = CHECKS[check](agentrl_envs.get_task(task), split)
    except ConformanceSkip as e:
        pytest.skip(str(e))
    for note in notes:
        print(f"{task} {split} {check}: {note}")
        warnings.warn(f"conformance {task} {split} {check}: {note}", stacklevel=1)
