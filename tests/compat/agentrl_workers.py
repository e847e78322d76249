"""Helpers of the compat tests: a task script of this folder run as an AgentRL worker process
registered with a controller (whether AgentRL's packages are installed: ``ci_helpers.require``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from stack_helpers import wait_for

HERE = Path(__file__).resolve().parent


@contextmanager
def agentrl_worker(script: str, controller: str, task: str, log: Path, *args: str) -> Iterator[int]:
    """``python script CONTROLLER/api PORT *args`` (a task script of this folder) until it has
    registered ``task`` with the controller at ``controller``; its port. Stopped afterwards."""
    from agentrl_envs.stack import free_port

    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / script), f"{controller}/api", str(port), *args], stdout=out, stderr=subprocess.STDOUT
        )
        try:

            def live() -> bool:
                assert proc.poll() is None, f"{script} exited:\n{log.read_text()[-3000:]}"
                return bool(httpx.get(f"{controller}/api/list_workers").json().get(task))

            wait_for(live, timeout=60)
            yield port
        finally:
            proc.terminate()
            proc.wait(10)
