"""Shared by the container tests (not a conftest: conftest module names collide across folders).

``require_docker()`` skips a test when no Docker engine answers, except under ``CI=true``, where
``.ci/run`` must have started one (``.ci/docker.sh``) and a missing engine fails the test.
``built_images`` builds (or reuses, by input hash) the base, controller and worker images of
:data:`TASKS` once per test session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from agentrl_envs.containers.build import Built, build_all
from agentrl_envs.containers.engine import docker_client, engine_available

TASKS = ["db", "os", "kg"]


def require_docker() -> None:
    try:
        import docker  # noqa: F401
    except ImportError:
        sdk = False
    else:
        sdk = True
    if sdk and engine_available():
        return
    why = "the docker SDK is not installed (pip install 'agentrl-envs[docker]')" if not sdk else "no Docker engine answers"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {why}: .ci/run must start the engine (.ci/docker.sh)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def built_images() -> Iterator[dict[str, Built]]:
    """``{"base": Built, "controller": Built, "worker-db": Built, ...}`` (one worker per task of TASKS), built or reused."""
    require_docker()
    yield {b.name: b for b in build_all(TASKS, log=lambda _: None)}


@pytest.fixture
def client():
    require_docker()
    c = docker_client()
    yield c
    c.close()
