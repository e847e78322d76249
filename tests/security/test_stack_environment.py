"""Issue 38: the processes of a local stack get only the tokens they need. Workers run task code
(and sandboxes that have read their parent's environment before: finding 1), so they get the
worker secret and never the client token, whether it was given to the stack or inherited from the
environment of the process that started it; the controller gets both. Read from
``/proc/<pid>/environ`` of the running processes, and of a worker the supervisor restarted."""

from __future__ import annotations

import os
import signal

import httpx
from stack_helpers import wait_for

from agentrl_envs.stack import LocalStack
from agentrl_envs.transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV


def environ(pid: int) -> dict[str, str]:
    """The environment process ``pid`` started with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        entries = f.read().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in entries if e)


def test_workers_get_the_worker_secret_and_never_the_client_token(tmp_path, monkeypatch):
    monkeypatch.setenv(CLIENT_TOKEN_ENV, "inherited-client-token")  # as under `AGENTRL_CLIENT_TOKEN=... agentrl-envs up`
    headers = {"Authorization": "Bearer given-client-token"}
    with LocalStack(["echo", "db"], client_token="given-client-token", worker_secret="w-secret-env", log_dir=tmp_path) as stack:
        controller, *workers = stack.processes
        env = environ(controller.proc.pid)
        assert env[CLIENT_TOKEN_ENV] == "given-client-token" and env[WORKER_SECRET_ENV] == "w-secret-env"
        for w in workers:
            env = environ(w.proc.pid)
            assert env[WORKER_SECRET_ENV] == "w-secret-env", w.name
            assert CLIENT_TOKEN_ENV not in env, w.name
            assert not any("client-token" in v for v in env.values()), w.name

        # A worker the supervisor starts again gets the same, no more.
        old = workers[0].proc.pid
        os.kill(old, signal.SIGKILL)

        def restarted() -> bool:
            p = stack.processes[1]
            return (
                p.proc.pid != old and p.alive() and "echo" in httpx.get(f"{stack.url}/api/list_workers", headers=headers).json()
            )

        wait_for(restarted, timeout=60, interval=0.2)
        env = environ(stack.processes[1].proc.pid)
        assert env[WORKER_SECRET_ENV] == "w-secret-env" and CLIENT_TOKEN_ENV not in env
