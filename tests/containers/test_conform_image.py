"""`agentrl-envs conform --image IMAGE`: the example Node.js worker's image passes the suite.

The image is built here from examples/node_worker/Dockerfile FROM agentrl/base (imported from
the debootstrapped Debian root filesystem, as `agentrl-envs build` does; Node.js comes from
Debian's packages inside the build), then `conform --image` starts it as `up --backend docker`
starts a worker (host network, HOST/PORT, `--controller URL --log-level warning` and the
arguments after `--`), lets it register with a controller of its own and runs every check over
the wire, the image's HEALTHCHECK included. The container is gone afterwards. Our own DB worker's
image (`agentrl-envs build db`) passes the same way, its references replayed through the container.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures

from agentrl_envs.conformance.wire import CHECKS
from agentrl_envs.containers.build import ensure_base

pytestmark = pytest.mark.docker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node_worker"
IMAGE = "agentrl/worker-node_sum:conform-test"


@pytest.fixture
def node_image(client):  # noqa: F811
    base = ensure_base(client, log=lambda _: None)
    client.images.build(
        path=str(EXAMPLE), tag=IMAGE, buildargs={"BASE_IMAGE": base.ref}, network_mode="host", rm=True, forcerm=True
    )
    return IMAGE


def test_the_node_workers_image_passes_every_check(node_image, client):  # noqa: F811
    image = client.images.get(node_image)
    assert any("/health" in part for part in image.attrs["Config"]["Healthcheck"]["Test"])
    argv = [sys.executable, "-m", "agentrl_envs.cli", "conform", "--image", node_image, "--turn-limit", "10"]
    argv += ["--worker-idle-timeout", "2", "--json", "--", "--concurrency", "3", "--idle-timeout", "2"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["task"] == "node_sum" and report["passed"]
    assert {r["name"]: r["outcome"] for r in report["results"]} == dict.fromkeys(CHECKS, "passed"), run.stdout
    assert not client.containers.list(all=True, filters={"ancestor": node_image}), "the container under test is removed"


def test_our_db_workers_image_passes_every_check(built_images, client):  # noqa: F811
    ref = built_images["worker-db"].ref
    argv = [sys.executable, "-m", "agentrl_envs.cli", "conform", "--image", ref, "--json", "--", "--concurrency", "2"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["task"] == "db" and {r["name"]: r["outcome"] for r in report["results"]} == dict.fromkeys(CHECKS, "passed")
    assert not client.containers.list(all=True, filters={"ancestor": ref}), "the container under test is removed"
