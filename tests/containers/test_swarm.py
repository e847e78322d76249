"""deploy/swarm: the stack deployed on a single-node Docker Swarm, played through its controller.

The engine is put in swarm mode only if it is not in it already, and then left again (with the
``docker_gwbridge`` network that swarm mode creates), so other tests find it as it was. The OS
worker is not deployed here (``AGENTRL_OS_REPLICAS=0``): its sessions are containers on the same
engine, which the other container tests count; docs/deploy.md records the manual run with it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures

from agentrl_envs.stack import free_port

pytestmark = pytest.mark.docker

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "swarm" / "deploy.sh"
GWBRIDGE = "docker_gwbridge"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@pytest.fixture
def swarm(client):  # noqa: F811
    """A swarm manager on this engine: the existing one, or one made here and left afterwards."""
    if shutil.which("docker") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the docker CLI is missing (docker stack deploy needs it)")
        pytest.skip("the docker CLI is missing (docker stack deploy needs it)")
    state = client.info()["Swarm"]
    created = False
    had_gwbridge = bool(client.networks.list(names=[GWBRIDGE]))
    if state["LocalNodeState"] == "inactive":
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
        created = True
    elif not state.get("ControlAvailable"):
        pytest.skip(f"this engine is in a swarm but not a manager ({state['LocalNodeState']})")
    try:
        yield
    finally:
        if created:
            docker("swarm", "leave", "--force")
            if not had_gwbridge:
                docker("network", "rm", GWBRIDGE, check=False)
            assert client.info()["Swarm"]["LocalNodeState"] == "inactive"


def test_stack_on_single_node_swarm_serves_echo_and_db(built_images, swarm, client):  # noqa: F811
    images = {name: b.ref for name, b in built_images.items()}
    run_id = secrets.token_hex(4)
    stack, network, port = f"agentrl-test-{run_id}", f"agentrl-test-{run_id}", free_port()
    env = {
        **os.environ,
        "AGENTRL_STACK": stack,
        "AGENTRL_NETWORK": network,
        "AGENTRL_CONTROLLER_PORT": str(port),
        "AGENTRL_CONTROLLER_IMAGE": images["controller"],
        "AGENTRL_WORKER_DB_IMAGE": images["worker-db"],
        "AGENTRL_OS_REPLICAS": "0",
        "AGENTRL_WAIT_S": "90",
        # the services listen beyond loopback: the controller requires tokens there
        "AGENTRL_CLIENT_TOKEN": secrets.token_urlsafe(16),
        "AGENTRL_WORKER_SECRET": secrets.token_urlsafe(16),
    }
    auth = {"Authorization": f"Bearer {env['AGENTRL_CLIENT_TOKEN']}"}
    url = f"http://127.0.0.1:{port}"
    try:
        up = subprocess.run(["bash", str(DEPLOY), "up"], env=env, capture_output=True, text=True, timeout=150)
        assert up.returncode == 0, up.stdout + up.stderr

        services = docker("stack", "services", stack, "--format", "{{.Name}} {{.Image}}").stdout.split("\n")
        assert sorted(s for s in services if s) == sorted(
            [
                f"{stack}_controller {images['controller']}",
                f"{stack}_worker-db {images['worker-db']}",
                f"{stack}_worker-echo {images['controller']}",
                f"{stack}_worker-os agentrl/worker-os:latest",
            ]
        )
        health = httpx.get(f"{url}/health", timeout=5).json()
        assert health["status"] == "ok" and health["live_workers"] == {"echo": 1, "db": 1}

        # Each worker registered the address it has on the stack's overlay network, and the
        # controller reaches it there (it dispatched the episodes below to it).
        subnet = ipaddress.ip_network(client.networks.get(network).attrs["IPAM"]["Config"][0]["Subnet"])
        assert httpx.get(f"{url}/api/list_workers", timeout=5).status_code == 401  # no token, no answer
        workers = httpx.get(f"{url}/api/list_workers", headers=auth, timeout=5).json()
        for task in ("echo", "db"):
            (worker,) = workers[task]
            assert worker["alive"], worker
            assert ipaddress.ip_address(urlsplit(worker["address"]).hostname) in subnet, worker

        for task, total in (("echo", 8), ("db", 60)):
            check = subprocess.run(
                [sys.executable, "-m", "agentrl_envs.cli", "check", task, "--controller", url, "--json"],
                capture_output=True, text=True, timeout=120, env=env,
            )  # fmt: skip
            assert check.returncode == 0, check.stderr[-2000:]
            result = json.loads(check.stdout)
            assert (result["total"], result["solved"]) == (total, total), result
    finally:
        down = subprocess.run(["bash", str(DEPLOY), "down"], env=env, capture_output=True, text=True, timeout=150)
    assert down.returncode == 0, down.stdout + down.stderr
    label = f"com.docker.stack.namespace={stack}"
    assert not client.containers.list(all=True, filters={"label": label})
    assert not client.services.list(filters={"label": label})
    deadline = time.monotonic() + 30
    while client.networks.list(names=[network]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not client.networks.list(names=[network]), "docker stack rm removes the stack's network"
