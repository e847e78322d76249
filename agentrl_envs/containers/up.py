"""``agentrl-envs up --backend docker``: the controller and one worker per task as containers.

``with DockerStack(["db"]) as stack: ... stack.url ...`` starts ``agentrl/controller`` and
``agentrl/worker-<task>`` (built by ``agentrl-envs build``) on the host network, each on its own
port, the workers pointed at the controller with ``--controller URL``; waits until every
container reports healthy (its image's ``HEALTHCHECK`` on ``/health``) and every task has a live
worker at the controller; on exit it removes exactly the containers it started, by id. Every
container carries the label ``agentrl.stack=<stack id>``.

Workers run under the engine's restart policy ``on-failure``: one that dies (a crash, SIGKILL, the
OOM killer) is started again by the engine, on the same port, after the engine's backoff (100 ms,
doubling, at most a minute; reset once it has run 10 s). :meth:`DockerStack.failure` (polled by
``up``) counts those restarts and gives a worker up (stops it, and says why) once it restarted
``restart.max_crashes`` times within ``restart.window_s``. The controller has no restart policy:
it holds the sessions, and ``up`` stops when it exits. Stopping the stack (Ctrl-C) stops the
containers first, which the engine never restarts.

Workers on other hosts join the same controller with
``docker run --network host -e PORT=5021 agentrl/worker-db --controller http://THIS_HOST:PORT/api --self http://THAT_HOST:5021/api``
(the controller must then listen on a reachable address: ``host="0.0.0.0"``).

A worker image labelled ``agentrl.sandbox-profile=userns`` (the OS worker: its sessions are
bubblewrap sandboxes in user namespaces inside its container) runs as its image's non-root user
with only SETUID and SETGID in its bounding set (for the id-mapping helpers), the seccomp profile
``seccomp-userns.json``, an unmasked ``/proc`` and a tmpfs for its sessions
(:func:`.engine.userns_host_config`); no engine socket. Only when the task's options select
what its label ``agentrl.socket-option`` names (the OS task: ``backend=docker``, sessions as sibling
containers) does it get the engine's socket, as root: that gives it control of this engine (root on
this host), which is why it is opt-in.
"""

from __future__ import annotations

import secrets
import signal
import sys
import threading
import time
from typing import Any

import httpx

from ..errors import InfrastructureError
from ..stack import free_port, serve_until_stopped, tasks_without_live_worker, worker_args
from ..supervisor import RestartPolicy, describe_exit
from ..transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, bearer
from .engine import (
    CONTROLLER_REPO,
    DOCKER_SOCKET,
    SANDBOX_PROFILE_LABEL,
    SOCKET_OPTION_LABEL,
    STACK_LABEL,
    docker_client,
    image_exists,
    userns_host_config,
    worker_repo,
)


class DockerStack:
    """Containers of one stack; ``containers`` maps a role (``controller``, ``worker-db``) to its container."""

    def __init__(
        self,
        tasks: list[str],
        *,
        split: str | None = None,
        task_options: dict[str, dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tag: str = "latest",
        startup_timeout: float = 120.0,
        extra_run_args: dict[str, dict[str, Any]] | None = None,
        client_token: str | None = None,
        worker_secret: str | None = None,
        insecure: bool = False,
        restart: RestartPolicy | None = RestartPolicy(),  # noqa: B008 - frozen, shared safely
        report: Any = None,
    ) -> None:
        """``restart``: when a worker the engine keeps restarting is given up (its ``max_crashes``
        and ``window_s``; the delays are the engine's); None: workers are not restarted.
        ``report(line)``: told of each restart and give-up (default: nothing)."""
        if not tasks:
            raise ValueError("DockerStack needs at least one task")
        self.tasks = list(dict.fromkeys(tasks))
        self.split = split
        self.task_options = task_options or {}
        self.host = host
        self.port = port or free_port()
        # Clients reach a 0.0.0.0 listener through loopback.
        self.url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}"
        self.tag = tag
        self.startup_timeout = startup_timeout
        self.extra_run_args = extra_run_args or {}
        #: Passed to the containers in their environment (never on a command line: ``docker
        #: inspect`` shows both, but the environment is not in the process list of the host).
        self.client_token = client_token
        self.worker_secret = worker_secret
        self.insecure = insecure
        self.id = secrets.token_hex(6)
        self.containers: dict[str, Any] = {}
        self._client: Any = None
        self.restart = restart
        self.report = report or (lambda line: None)
        self.restarts: dict[str, list[float]] = {}  # role -> time.monotonic() of each restart seen
        self._restart_counts: dict[str, int] = {}  # role -> the engine's RestartCount last seen
        self.given_up: dict[str, str] = {}  # role -> why

    def __enter__(self) -> DockerStack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, role: str, image: str, port: int, args: list[str], options: dict[str, Any] | None = None) -> None:
        if not image_exists(self._client, image):
            raise InfrastructureError(f"image {image} is missing: run `agentrl-envs build {' '.join(self.tasks)}` first")
        img = self._client.images.get(image)
        labels = img.labels or {}
        extra = dict(self.extra_run_args.get(role, {}))
        binds = extra.pop("volumes", {})
        user = extra.pop("user", None)
        host_fields: dict[str, Any] = {}
        key, _, value = labels.get(SOCKET_OPTION_LABEL, "").partition("=")
        if key and str((options or {}).get(key, "")) == value:
            # Opt-in: the worker's sessions are sibling containers on this engine (envs/os/Dockerfile).
            binds[DOCKER_SOCKET] = {"bind": DOCKER_SOCKET, "mode": "rw"}
            user = user or "root"
        elif labels.get(SANDBOX_PROFILE_LABEL) == "userns":
            host_fields = userns_host_config(img.attrs.get("Config", {}).get("User") or "")
        api = self._client.api
        if role != "controller" and self.restart is not None:
            extra.setdefault("restart_policy", {"Name": "on-failure", "MaximumRetryCount": 0})
        host_config = api.create_host_config(network_mode="host", binds=binds or None, **extra)
        for k, v in host_fields.items():
            host_config[k] = v if k != "CapDrop" else sorted({*host_config.get("CapDrop", []), *v})
        env = {"HOST": self.host, "PORT": str(port)}
        if self.worker_secret:
            env[WORKER_SECRET_ENV] = self.worker_secret
        if self.client_token and role == "controller":
            env[CLIENT_TOKEN_ENV] = self.client_token
        if self.insecure:
            env["AGENTRL_INSECURE"] = "1"
        created = api.create_container(
            image,
            command=args,
            environment=env,
            labels={STACK_LABEL: self.id, "agentrl.role": role},
            name=f"agentrl-{self.id}-{role}",
            user=user,
            host_config=host_config,
            detach=True,
        )
        c = self._client.containers.get(created["Id"])
        self.containers[role] = c  # registered before start: stop() removes it whatever happens next
        c.start()

    def start(self) -> None:
        self._client = docker_client()
        self._run("controller", f"{CONTROLLER_REPO}:{self.tag}", self.port, ["--log-level", "warning"])
        for task in self.tasks:
            port = free_port()
            args = ["--controller", f"{self.url}/api", "--log-level", "warning"]
            args += worker_args(split=self.split, options=self.task_options.get(task))
            self._run(f"worker-{task}", f"{worker_repo(task)}:{self.tag}", port, args, self.task_options.get(task))
        self._wait_ready()

    def logs_tail(self, role: str, lines: int = 20) -> str:
        try:
            return self.containers[role].logs(tail=lines).decode(errors="replace")
        except Exception as e:  # the container may be gone already
            return f"(no logs: {e})"

    def dead(self) -> list[str]:
        """Roles whose container is no longer running (a worker the engine is restarting included)."""
        out = []
        for role, c in self.containers.items():
            try:
                c.reload()
                if c.status != "running":
                    out.append(role)
            except Exception:
                out.append(role)
        return out

    def failure(self) -> str | None:
        """Why this stack no longer serves (None while it serves): the controller's container is
        not running, or a worker was given up: restarted by the engine ``restart.max_crashes``
        times within ``restart.window_s`` (it is stopped then). A worker the engine is restarting
        is not a failure. Without a restart policy, any container that is not running. Each call
        reads the containers' state; ``up`` calls it every 2 s."""
        now = time.monotonic()
        for role, c in self.containers.items():
            try:
                c.reload()
            except Exception as e:  # removed behind our back
                return f"{role}: its container is gone ({e})"
            if role == "controller" or self.restart is None:
                if c.status != "running":
                    how = describe_exit(c.attrs.get("State", {}).get("ExitCode"))
                    return f"{role} exited ({how}):\n{self.logs_tail(role)}"
                continue
            if role not in self.given_up:
                self._count_restarts(role, c, now)
        return next(iter(self.given_up.values()), None)

    def _count_restarts(self, role: str, c: Any, now: float) -> None:
        assert self.restart is not None
        count = int(c.attrs.get("RestartCount") or 0)
        new = count - self._restart_counts.get(role, 0)
        self._restart_counts[role] = count
        if new <= 0:
            return
        seen = self.restarts.setdefault(role, [])
        seen.extend([now] * new)
        recent = [t for t in seen if now - t <= self.restart.window_s]
        how = describe_exit(c.attrs.get("State", {}).get("ExitCode"))
        if len(recent) < self.restart.max_crashes:
            self.report(
                f"{role} exited ({how}); restarted by the engine (restart {count}, {len(recent)} within {self.restart.window_s:.0f} s)"
            )
            return
        try:  # no more restarts: the engine would go on for ever
            c.update(restart_policy={"Name": "no"})
            c.stop(timeout=5)
        except Exception:
            pass
        self.given_up[role] = why = (
            f"{role} was restarted {len(recent)} times within {self.restart.window_s:.0f} s (the last exit: {how}); "
            f"given up and stopped. The end of its log:\n{self.logs_tail(role, 15)}"
        )
        self.report(why)

    def health(self) -> dict[str, str]:
        """Each container's health status (``starting``, ``healthy``, ``unhealthy``) or its state."""
        out = {}
        for role, c in self.containers.items():
            c.reload()
            state = c.attrs.get("State", {})
            out[role] = state.get("Health", {}).get("Status") if state.get("Running") else state.get("Status", "gone")
        return out

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0, headers=bearer(self.client_token)) as http:
            while True:
                health = self.health()
                gone = [r for r, s in health.items() if s not in ("starting", "healthy", "unhealthy")]
                if gone:
                    tails = "\n".join(f"--- {r}\n{self.logs_tail(r)}" for r in gone)
                    raise InfrastructureError(f"containers {gone} stopped during start-up:\n{tails}")
                if all(s == "healthy" for s in health.values()) and not tasks_without_live_worker(http, self.url, self.tasks):
                    return
                if time.monotonic() > deadline:
                    tails = "\n".join(f"--- {r} ({health[r]})\n{self.logs_tail(r, 10)}" for r in self.containers)
                    raise InfrastructureError(f"stack not ready after {self.startup_timeout:.0f} s:\n{tails}")
                time.sleep(0.5)

    def stop(self, grace: int = 5) -> None:
        """Stop and remove the containers this stack started (workers first), by id. Idempotent."""
        for role in reversed(list(self.containers)):
            c = self.containers.pop(role)
            try:
                c.stop(timeout=grace)
            except Exception:
                pass
            try:
                c.remove(force=True)
            except Exception:
                pass
        if self._client is not None:
            self._client.close()
            self._client = None


def cmd_up_docker(
    a: Any,
    options: dict[str, dict[str, Any]],
    *,
    client_token: str | None = None,
    worker_secret: str | None = None,
    insecure: bool = False,
    announce: Any = None,
) -> int:
    """``up --backend docker``: run until Ctrl-C/SIGTERM, the controller exits or a worker is given
    up (:meth:`DockerStack.failure`); always tear down.
    ``announce(port)``: prints the tokens once the stack is up (the CLI's)."""
    tasks = [t for t in a.tasks.split(",") if t]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with DockerStack(
        tasks,
        split=a.split,
        task_options=options,
        port=a.port,
        host=a.host,
        client_token=client_token,
        worker_secret=worker_secret,
        insecure=insecure,
    ) as stack:
        # From here Ctrl-C only sets the flag: a KeyboardInterrupt raised inside a subprocess or
        # docker-client call could leave a lock held that the teardown then waits on forever.
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stack.report = lambda line: print(f"supervisor: {line}", file=sys.stderr, flush=True)
        ids = ", ".join(f"{r}={c.short_id}" for r, c in stack.containers.items())
        print(f"controller: {stack.url}/api   tasks: {', '.join(tasks)}   containers: {ids}", flush=True)
        if announce is not None:
            announce(stack.port)
        print(f"label: {STACK_LABEL}={stack.id}   press Ctrl-C to stop (a worker that exits is restarted)", flush=True)
        return serve_until_stopped(stack, stop, 2.0)
