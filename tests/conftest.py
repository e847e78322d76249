"""Shared fixtures (helpers live in stack_helpers.py: several conftest modules share one name)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from stack_helpers import Stack


def pytest_configure(config: pytest.Config) -> None:
    # In CI the MariaDB tests must run for real, never skip quietly (.ci/run starts the server).
    if os.environ.get("CI") == "true" and not os.environ.get("AGENTRL_TEST_MYSQL_URL"):
        raise pytest.UsageError("CI=true but AGENTRL_TEST_MYSQL_URL is unset: .ci/run must start MariaDB")


@pytest.fixture
def make_stack() -> Iterator[Any]:
    stacks: list[Stack] = []

    def factory(**kwargs: Any) -> Stack:
        s = Stack(**kwargs)
        stacks.append(s)
        return s

    yield factory
    for s in stacks:
        s.close()
