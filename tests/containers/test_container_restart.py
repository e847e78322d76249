"""Issue 38: under ``up --backend docker`` a worker container whose process dies is restarted by
the engine (``on-failure``), its sessions end ``task error`` naming it, it registers again and
serves; one the engine keeps restarting is given up (stopped, and the stack says why). The
worker's process is killed from the host by its PID (``docker kill`` would be an operator's stop,
which the engine never restarts)."""

from __future__ import annotations

import os
import signal

import httpx
import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures
from stack_helpers import wait_for

from agentrl_envs.client import ControllerClient
from agentrl_envs.containers.up import DockerStack
from agentrl_envs.errors import SessionFinishedError
from agentrl_envs.supervisor import RestartPolicy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def live_db_worker(url: str) -> dict | None:
    live = [w for w in httpx.get(f"{url}/api/list_workers").json().get("db", []) if w["alive"]]
    return live[0] if live else None


def kill_worker(stack: DockerStack) -> None:
    c = stack.containers["worker-db"]
    c.reload()
    os.kill(c.attrs["State"]["Pid"], signal.SIGKILL)


def wait_reregistered(stack: DockerStack, before: dict) -> dict:
    """Poll (as ``up`` does) until the worker's new run is registered; the new entry."""
    wait_for(
        lambda: stack.failure() is None and (live_db_worker(stack.url) or before)["id"] != before["id"], timeout=180, interval=0.5
    )
    return live_db_worker(stack.url)


def test_a_killed_worker_container_is_restarted_then_given_up_after_repeated_crashes(built_images, client):  # noqa: F811
    lines: list[str] = []
    policy = RestartPolicy(max_crashes=3, window_s=600)
    with DockerStack(["db"], restart=policy, report=lines.append) as stack, ControllerClient(stack.url) as api:
        first = live_db_worker(stack.url)
        sid, _ = api.start_sample("db", 0)
        kill_worker(stack)
        second = wait_reregistered(stack, first)
        assert second["address"] == first["address"]  # the same container, port and address
        with pytest.raises(SessionFinishedError) as e:
            api.interact(sid, [{"role": "assistant", "content": "x"}])
        assert e.value.data["status"] == "task error" and first["address"] in e.value.message, e.value.message
        assert "restarted" in e.value.message
        sid, out = api.start_sample("db", 0)  # the restarted worker serves
        assert out.tools and not out.finish
        api.cancel(sid)

        kill_worker(stack)
        third = wait_reregistered(stack, second)
        kill_worker(stack)  # the third restart within the window: given up
        wait_for(lambda: stack.failure() is not None, timeout=120, interval=0.5)
        assert third["id"] != second["id"]
        failure = stack.failure()
        assert failure.startswith("worker-db was restarted 3 times within 600 s") and "given up" in failure, failure
        c = stack.containers["worker-db"]
        c.reload()
        assert c.status == "exited" and c.attrs["RestartCount"] == 3
    assert sum("restarted by the engine" in line for line in lines) == 2, lines
