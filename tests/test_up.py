"""`agentrl-envs up`: the local stack comes up, serves, and Ctrl-C/SIGTERM stop every process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
from stack_helpers import wait_for

from agentrl_envs.stack import free_port


def port_open(url: str) -> bool:
    try:
        httpx.get(url, timeout=0.5)
        return True
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_serves_then_stops_all_processes(sig):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl_envs.cli", "up", "--tasks", "echo,db", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "controller:" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, "up did not print its URL"
            line = proc.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        assert f"{url}/api" in line
        workers = httpx.get(f"{url}/api/list_workers").json()
        assert set(workers) == {"echo", "db"}
        addresses = [w["address"] for ws in workers.values() for w in ws]
        r = httpx.post(f"{url}/api/start_sample", json={"name": "db", "index": 0})
        assert r.status_code == 200 and r.json()["tools"][0]["function"]["name"] == "execute_sql"
        proc.send_signal(sig)
        assert proc.wait(30) == 0
        wait_for(
            lambda: not port_open(f"{url}/health") and not any(port_open(a.removesuffix("/api") + "/health") for a in addresses),
            timeout=15,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
