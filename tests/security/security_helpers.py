"""A controller and a worker with tokens on, over real loopback HTTP, for the security tests
(a module of its own: several conftest modules share the name ``conftest``).

Tokens: ``ADMIN`` (the shared client token: client and admin routes), ``ALICE`` (at most 2 sessions
open), ``BOB`` (no quota), ``CAROL`` (2 starts a minute), and the worker secret ``WORKER``. The
HTTP limits are small (64 KiB bodies, 1 s to read a request) so the abuse cases answer quickly.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from stack_helpers import wait_for
from tasks_for_tests import Calc

from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread, free_port
from agentrl_envs.transport.auth import controller_authenticator, worker_authenticator
from agentrl_envs.transport.http11 import HttpLimits
from agentrl_envs.worker import WorkerService, create_worker_app

ADMIN = "admin-token-0123456789"
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789"
CAROL = "carol-token-0123456789"
WORKER = "worker-secret-0123456789"
LIMITS = HttpLimits(max_body=64 << 10, max_header_bytes=16 << 10, max_headers=64, read_timeout=1.0)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class SecureStack:
    url: str  # the controller's, without /api
    worker_url: str  # the worker's, without /api
    controller: ServerThread
    worker: ServerThread
    service: ControllerService
    worker_service: WorkerService

    def close(self) -> None:
        self.worker.stop()
        self.controller.stop()


def start_secure_stack(tmp: Path, *, limits: HttpLimits = LIMITS, concurrency: int = 8, tls: dict | None = None) -> SecureStack:
    tokens = tmp / "tokens"
    tokens.write_text(
        f"# name token [admin] [max_sessions=N] [starts_per_minute=R]\n"
        f"alice {ALICE} max_sessions=2\nbob {BOB}\ncarol {CAROL} starts_per_minute=2\n"
    )
    tokens.chmod(0o600)
    tls = tls or {}
    service = ControllerService(worker_secret=WORKER, worker_ssl=tls.get("worker_ssl"))
    controller_auth = controller_authenticator(client_tokens=[ADMIN], tokens_file=tokens, worker_secret=WORKER)
    controller = ServerThread(
        create_controller_app(service, auth=controller_auth), limits=limits, **tls.get("controller", {})
    ).start()
    port = free_port()
    scheme = "https" if tls else "http"
    worker_service = WorkerService(
        TaskRuntime(Calc, split="dev"),
        concurrency=concurrency,
        controller_url=f"{controller.url}/api",
        self_address=f"{scheme}://127.0.0.1:{port}/api",
        heartbeat_interval=0.5,
        worker_secret=WORKER,
        verify=ssl.create_default_context(cafile=tls["verify"]) if "verify" in tls else True,
    )
    worker = ServerThread(
        create_worker_app(worker_service, auth=worker_authenticator(WORKER)), port=port, limits=limits, **tls.get("worker", {})
    ).start()
    stack = SecureStack(controller.url, worker.url, controller, worker, service, worker_service)
    verify = ssl.create_default_context(cafile=tls["verify"]) if "verify" in tls else True
    wait_for(
        lambda: any(
            w["alive"]
            for w in httpx.get(f"{stack.url}/api/list_workers", headers=auth(ADMIN), verify=verify).json().get("calc", [])
        )
    )
    return stack


COUNTER = Path(__file__).parents[1] / "compat" / "agentrl_counter_task.py"


@contextmanager
def agentrl_counter_worker(url: str, log: Path) -> Iterator[int]:
    """AgentRL's own TaskWorker (agentrl-worker) serving ``agentrl-counter``, registered with the
    controller at ``url`` with the worker secret in its URL's userinfo (what it can send: HTTP
    Basic); its port, once the controller lists it. Stopped afterwards."""
    port = free_port()
    controller = f"{url.replace('http://', f'http://agentrl:{WORKER}@')}/api"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(COUNTER), controller, str(port)], stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(
                lambda: (
                    proc.poll() is None
                    and bool(httpx.get(f"{url}/api/list_workers", headers=auth(ADMIN)).json().get("agentrl-counter"))
                ),
                timeout=60,
            )
            yield port
        finally:
            proc.terminate()
            proc.wait(10)
