"""The Docker engine connection and the names every container-side module shares.

:func:`docker_client` returns a connected ``docker.DockerClient`` or raises
:class:`DockerUnavailable` saying how to fix it (install the SDK; start the engine, e.g. with
``.ci/docker.sh``). Nothing here starts or removes containers.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InfrastructureError

#: Image repositories; tags are content hashes of the inputs, plus ``latest``.
BASE_REPO = "agentrl/base"
CONTROLLER_REPO = "agentrl/controller"
WORKER_REPO_PREFIX = "agentrl/worker-"

#: Label on every image we build: the hash of its inputs (reuse the image when it matches).
INPUTS_LABEL = "agentrl.inputs"
#: Label on every container ``up`` starts: the stack's id (teardown removes by id, never by name).
STACK_LABEL = "agentrl.stack"
#: Image label: ``true`` when the worker needs the engine's socket (its sessions are containers).
MOUNT_SOCKET_LABEL = "agentrl.mount-docker-socket"
DOCKER_SOCKET = "/var/run/docker.sock"


class DockerUnavailable(InfrastructureError):
    """The docker SDK is missing or no Docker engine answers."""

    code = "docker_unavailable"


def worker_repo(task: str) -> str:
    return f"{WORKER_REPO_PREFIX}{task}"


def docker_client(timeout: float = 120.0) -> Any:
    """A connected client (``DOCKER_HOST`` honoured); raises :class:`DockerUnavailable`."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable("the docker SDK is not installed: pip install 'agentrl-envs[docker]'") from None
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as e:  # DockerException, requests' ConnectionError, PermissionError...
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailable(
            f"no Docker engine answers at {where} ({e.__class__.__name__}: {e}); start one, e.g. `sudo bash .ci/docker.sh`"
        ) from None
    return client


def engine_available() -> bool:
    """True when the SDK is installed and an engine answers (for tests that skip without one)."""
    try:
        docker_client(timeout=10).close()
    except DockerUnavailable:
        return False
    return True


def image_exists(client: Any, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True
