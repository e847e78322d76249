"""Nothing left behind by a killed OS worker on Docker: its session containers are removed by the
next worker's start (the worker itself in a container, as ``agentrl/worker-os`` runs) or by a
running worker's timer (workers as host processes), never those of a live worker. Workers are
killed with SIGKILL, so neither their ``close`` nor their ``atexit`` hook runs."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures

from agentrl_envs.containers.engine import DOCKER_SOCKET, worker_repo
from agentrl_envs.sandbox.docker import CONTAINER_LABEL, LABEL, PID_LABEL, own_container_id
from agentrl_envs.stack import ManagedProcess, free_port, worker_args

pytestmark = pytest.mark.docker
TEST_LABEL = "agentrl.test.reap"


def wait_until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)


class Worker:
    """An OS worker on the docker backend, in a container (``engine``: a docker client) or as a host process."""

    def __init__(self, reap_interval_s: float, *, engine: Any = None, log_dir: Path | None = None, run_id: str = "") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["--log-level", "warning", *worker_args(options={"backend": "docker", "reap_interval_s": reap_interval_s})]
        self.container: Any = None
        self.process: ManagedProcess | None = None
        if engine is not None:
            self.container = engine.containers.run(
                f"{worker_repo('os')}:latest",
                command=args,
                environment={"HOST": "127.0.0.1", "PORT": str(self.port)},
                network_mode="host",
                user="root",  # the image's opt-in socket mode (backend=docker): the socket is root's
                volumes={DOCKER_SOCKET: {"bind": DOCKER_SOCKET, "mode": "rw"}},
                labels={TEST_LABEL: run_id},
                detach=True,
            )
            self.owner_filter = f"{CONTAINER_LABEL}={self.container.id}"
        else:
            assert log_dir is not None
            argv = [sys.executable, "-m", "agentrl_envs.cli", "worker", "os", "--port", str(self.port), *args]
            self.process = ManagedProcess(f"worker-os-{self.port}", argv, log_dir / f"{self.port}.log")
            self.owner_filter = f"{PID_LABEL}={self.process.proc.pid}"
        self.http = httpx.Client(timeout=60)
        wait_until(self._serves, timeout=90)  # it serves once its start-up sweep is done

    def _serves(self) -> bool:
        if self.container is not None:
            self.container.reload()
            assert self.container.status in ("created", "running"), self.container.logs(tail=30).decode(errors="replace")
        else:
            assert self.process is not None and self.process.alive(), self.process.log_tail() if self.process else ""
        try:
            return self.http.get(f"{self.url}/health").status_code == 200
        except httpx.TransportError:
            return False

    def sandboxes(self, engine: Any) -> set[str]:
        """Ids of the sandbox containers this worker made (its sessions and its warm pool)."""
        return {c["Id"] for c in engine.api.containers(all=True, filters={"label": [LABEL, self.owner_filter]})}

    def open_session(self, session_id: int) -> None:
        r = self.http.post(f"{self.url}/api/start_sample", json={"index": 0, "session_id": session_id})
        assert r.status_code == 200, r.text
        assert "started" in self.bash(session_id, "sleep 300 & echo started")

    def bash(self, session_id: int, script: str) -> str:
        call = {"id": "c", "type": "function", "function": {"name": "bash_action", "arguments": json.dumps({"script": script})}}
        body = {"session_id": session_id, "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
        r = self.http.post(f"{self.url}/api/interact", json=body)
        assert r.status_code == 200, r.text
        return r.json()["env_out"]["messages"][0]["content"]

    def kill(self) -> None:
        if self.container is not None:
            self.container.kill(signal="SIGKILL")
            self.container.wait(timeout=30)
        else:
            assert self.process is not None
            self.process.proc.send_signal(signal.SIGKILL)
            self.process.proc.wait()

    def stop(self, engine: Any) -> None:
        self.http.close()
        if self.container is not None:
            try:
                self.container.stop(timeout=20)
            finally:
                self.container.remove(force=True)
        elif self.process is not None:
            self.process.stop(grace=20)
        for cid in self.sandboxes(engine):  # only if a test failed before the sweep
            engine.api.remove_container(cid, force=True)


@pytest.fixture
def workers(client: Any, tmp_path: Path) -> Iterator[Any]:  # noqa: F811
    started: list[Worker] = []
    run_id = secrets.token_hex(4)

    def start(reap_interval_s: float = 3600, *, in_container: bool) -> Worker:
        w = Worker(reap_interval_s, engine=client if in_container else None, log_dir=tmp_path, run_id=run_id)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop(client)


def test_next_containerised_worker_removes_a_killed_ones_sandboxes_and_spares_a_live_ones(
    built_images,  # noqa: F811 - the worker image holds this checkout's code
    client,  # noqa: F811
    workers,
):
    killed = workers(in_container=True)
    live = workers(in_container=True)  # its start-up sweep spared the running `killed`
    killed.open_session(1)
    killed.open_session(2)
    live.open_session(3)
    left = killed.sandboxes(client)
    assert len(left) >= 2

    killed.kill()
    assert killed.sandboxes(client) == left, "SIGKILL leaves them (until a sweep)"

    workers(in_container=True)  # a new worker container (new pid namespace, maybe the same pid 1)
    assert killed.sandboxes(client) == set()
    assert len(live.sandboxes(client)) >= 1
    assert "hello" in live.bash(3, "echo hello; jobs")


def test_running_worker_removes_a_killed_workers_sandboxes_on_its_timer(client, workers):  # noqa: F811
    killed = workers(in_container=False)
    live = workers(reap_interval_s=0.5, in_container=False)
    killed.open_session(1)
    live.open_session(2)
    assert killed.sandboxes(client)
    killed.kill()
    wait_until(lambda: not killed.sandboxes(client))
    assert live.sandboxes(client)
    assert "hello" in live.bash(2, "echo hello")


def test_own_container_id_reads_the_hostname_mount(tmp_path: Path) -> None:
    cid = "e7a151b744a9cd2b2eac25786569bc1f8724731aefc0126c97494503516756cc"
    inside = tmp_path / "inside"
    inside.write_text(
        "84 1 0:50 / / rw - overlay overlay rw\n"
        f"101 84 254:0 /var/lib/docker/containers/{cid}/resolv.conf /etc/resolv.conf rw - ext4 /dev/vda rw\n"
        f"102 84 254:0 /var/lib/docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/vda rw\n"
    )
    host = tmp_path / "host"
    host.write_text("22 1 254:0 / / rw - ext4 /dev/vda rw\n23 22 0:21 / /proc rw - proc proc rw\n")
    assert own_container_id(str(inside)) == cid
    assert own_container_id(str(host)) is None
    assert own_container_id(str(tmp_path / "missing")) is None
