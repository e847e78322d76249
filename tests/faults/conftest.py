"""Fixtures of the fault suite: a :class:`FaultStack` of real processes, stopped (by PID, after a
SIGCONT) whatever the test did, with its logs printed when the test failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_stack import FaultStack


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash.setdefault(_FAILED, False)
        item.stash[_FAILED] = item.stash[_FAILED] or report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def faults(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """``stack = faults()``: a controller started; add workers with ``stack.add_worker()``."""
    stacks: list[FaultStack] = []

    def make(**kwargs: Any) -> FaultStack:
        stack = FaultStack(tmp_path / f"logs-{len(stacks)}", **kwargs)
        stacks.append(stack)
        stack.start_controller()
        return stack

    yield make
    failed = request.node.stash.get(_FAILED, False)
    for stack in stacks:
        if failed:
            print(f"\n===== process logs ({stack.log_dir})\n{stack.logs()}")
        stack.close()
