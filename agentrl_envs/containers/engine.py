"""The Docker engine connection and the names every container-side module shares.

:func:`docker_client` returns a connected ``docker.DockerClient`` or raises
:class:`DockerUnavailable` saying how to fix it (install the SDK; start the engine, e.g. with
``.ci/docker.sh``). Nothing here starts or removes containers.
"""

from __future__ import annotations

import os
from pathlib import Path
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
#: Image label: ``userns`` when the worker runs sandboxes in user namespaces inside its container
#: (the socket-free OS worker): ``up`` then runs it with :func:`userns_host_config`.
SANDBOX_PROFILE_LABEL = "agentrl.sandbox-profile"
#: Image label: ``KEY=VALUE``, the task option that switches the worker to sessions as sibling
#: containers, for which ``up`` mounts the engine's socket (root on this host: opt-in only).
SOCKET_OPTION_LABEL = "agentrl.socket-option"
DOCKER_SOCKET = "/var/run/docker.sock"
#: Where the socket-free worker keeps its sessions' dirs (a tmpfs: overlayfs cannot be their upper layer).
SANDBOX_DIR = "/var/lib/agentrl-sandboxes"
SECCOMP_USERNS = Path(__file__).with_name("seccomp-userns.json")


def userns_host_config(user: str = "") -> dict[str, Any]:
    """What a worker with ``agentrl.sandbox-profile=userns`` needs, as Engine API HostConfig fields.

    * Capabilities: only CAP_SETUID and CAP_SETGID, and only in the bounding set: the worker is not
      root and holds none; ``newuidmap``/``newgidmap`` get them from file capabilities to map a
      session's user namespace (the image has no setuid program: nothing in it can become root).
      Hence no ``no-new-privileges``, which would void file capabilities.
    * Seccomp: :data:`SECCOMP_USERNS`, Docker's default refuses unshare/mount/setns to a process
      without CAP_SYS_ADMIN; this one allows them and refuses what no task needs (bpf, keyrings,
      modules, perf, io_uring, userfaultfd, ...).
    * An unmasked ``/proc`` (``--security-opt systempaths=unconfined``): a sandbox mounts a fresh
      ``/proc``, which Linux refuses while any part of the container's is masked or read-only. The
      files Docker protects that way are writable or readable by root only, which nothing here is.
    * A tmpfs for the session dirs (overlayfs cannot be an overlay's upper layer), owned by ``user``
      (the image's ``USER``, ``uid[:gid]``: Docker keeps an image dir's mode under a tmpfs, not its owner).
    """
    uid, _, gid = user.partition(":")
    owner = f",uid={uid},gid={gid or uid}" if uid.isdigit() and (gid or uid).isdigit() else ""
    return {
        "CapDrop": ["ALL"],
        "CapAdd": ["SETUID", "SETGID"],
        "SecurityOpt": ["seccomp=" + SECCOMP_USERNS.read_text()],
        "MaskedPaths": [],
        "ReadonlyPaths": [],
        "Tmpfs": {SANDBOX_DIR: "rw,exec,nosuid,nodev,mode=700" + owner},
    }


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
