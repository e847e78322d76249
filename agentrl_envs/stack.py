"""The embedded stack: a controller and one worker per task as local processes.

``with LocalStack(["db", "echo"]) as stack: ... stack.url ...`` starts them on free loopback
ports, waits until every task has a live worker, and on exit stops exactly the processes it
started (SIGTERM, then SIGKILL after a grace period); if this process dies without stopping them
(SIGKILL, the OOM killer), they stop themselves (:func:`exit_with_parent`). Each process logs to a file in
``stack.log_dir``: a temporary dir, removed on a clean exit and kept after an error, unless the
caller names one (kept). A start-up failure raises with the tail of the failing log.

Once up, a worker that exits is started again on its port by a :class:`~.supervisor.Supervisor`
(``restart``: its :class:`~.supervisor.RestartPolicy`; None: not restarted), after a backoff, and
given up after repeated exits in a short time; :meth:`LocalStack.failure` then says why the stack
no longer serves (so does an exited controller, which is not restarted: its sessions are lost).

Each process gets only the tokens it needs: the controller the client token and the worker
secret, the workers the worker secret alone (never the client token, even when this process has
it in its environment).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .errors import InfrastructureError
from .supervisor import RestartPolicy, Supervisor, describe_exit

log = logging.getLogger(__name__)

#: set in the environment of the processes LocalStack starts: the PID whose death ends them
PARENT_ENV = "AGENTRL_ENVS_EXIT_WITH"


def exit_with_parent(poll_s: float = 1.0, grace_s: float = 20.0) -> bool:
    """In a controller or worker that a LocalStack started: end this process when the stack's
    process dies without stopping it, so no controller or worker outlives its stack (they run in
    sessions of their own, so nothing else would). SIGTERM to itself (the servers' graceful
    shutdown), then a hard exit after ``grace_s``. Returns whether the watch was armed: only when
    :data:`PARENT_ENV` names this process's parent (the variable is removed, so grandchildren do
    not inherit it)."""
    wanted = os.environ.pop(PARENT_ENV, "")
    if not wanted.isdigit() or os.getppid() != int(wanted):
        return False
    parent = int(wanted)

    def watch() -> None:
        while os.getppid() == parent:  # reparented (to init or a subreaper) once the parent is gone
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Racy for a server in another process: between this call
    and that process's bind, any socket (a client's ephemeral port, too) may take it. A child
    server we start gets :func:`listening_socket` instead."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (port 0: one the kernel picks) and listening, for a
    child server to inherit (``--fd``): the port is the child's from this call on, with no window
    in which another socket can take it. A sweep run was lost to that window: a worker started on a
    port from :func:`free_port` found it taken ("address already in use") 40 minutes into the run."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds its own
        sock.bind((host, port))
        sock.listen(128)  # the server raises it to its own backlog when it starts serving
    except OSError as e:
        sock.close()
        raise InfrastructureError(f"cannot listen on {host}:{port}: {e}") from e
    return sock


class ManagedProcess:
    """A child process we started, with its log file; stopped by PID only."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        append: bool = False,
        listen: socket.socket | None = None,
    ) -> None:
        """``listen``: a listening socket (:func:`listening_socket`) the process serves on, passed
        as ``--fd N`` after ``argv``; this process's copy is closed once the child has its own."""
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self._log = open(log_path, "ab" if append else "wb")  # noqa: SIM115 - closed in stop()
        fds = () if listen is None else (listen.fileno(),)
        cmd = argv if listen is None else [*argv, "--fd", str(listen.fileno())]
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True, pass_fds=fds
            )
        finally:
            if listen is not None:
                listen.close()

    def restarted(self, note: str) -> ManagedProcess:
        """The same command again (this one has exited), its log appended to this one's after ``note``.
        It binds its ``--port`` itself: the socket the first one inherited closed with it."""
        self.stop()
        with open(self.log_path, "ab") as f:
            f.write(f"\n----- {note}\n".encode())
        return ManagedProcess(self.name, self.argv, self.log_path, self.env, append=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class ServerThread:
    """A uvicorn server (controller or worker app) on a loopback port, in a thread of its own: for
    tests and the conformance suite, where separate processes cannot load the task class."""

    def __init__(
        self,
        app: Any,
        port: int | None = None,
        *,
        limits: Any = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        listen: socket.socket | None = None,
    ) -> None:
        """``port``: bind this one (default: one the kernel picks); ``listen``: serve on this
        listening socket (:func:`listening_socket`) instead, for an app that must know its own
        address before it is built (a worker tells the controller where it is); closed in stop()."""
        import uvicorn

        # Bound here and served by uvicorn (``sockets=``): the port is the server's from this line
        # on. Before, a port from free_port was bound when the thread started, and any socket of
        # this process (a client's ephemeral port) could take it in between, as one did to a
        # LocalStack worker in a sweep run.
        self._sock = listen or listening_socket("127.0.0.1", port or 0)
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if ssl_certfile else 'http'}://127.0.0.1:{self.port}"
        from .transport.http11 import http_protocol
        from .transport.routes import FastRoutes

        routes = app if isinstance(app, FastRoutes) else None
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            loop="asyncio",
            http=http_protocol(10_000, routes, limits=limits),  # the protocol run_server serves with
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True, name=f"server-{self.port}"
        )

    def start(self, timeout: float = 60.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise InfrastructureError(f"the server on port {self.port} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self._sock.close()  # uvicorn closed its server on it; a never-started one still holds the port


def worker_args(*, split: str | None = None, data: str | None = None, options: dict[str, Any] | None = None) -> list[str]:
    """The ``agentrl-envs worker`` flags choosing a task's data and options."""
    args = ["--data", str(data)] if data else (["--split", split] if split else [])
    for key, value in (options or {}).items():
        args += ["--option", f"{key}={value}"]
    return args


def tasks_without_live_worker(http: httpx.Client, controller_url: str, tasks: list[str]) -> set[str]:
    """The tasks the controller has no live worker for (all of them while it does not answer)."""
    try:
        workers = http.get(f"{controller_url}/api/list_workers").json()
    except httpx.HTTPError:
        return set(tasks)
    return {t for t in tasks if not any(w["alive"] for w in workers.get(t, []))}


def serve_until_stopped(stack: Any, stop: threading.Event, poll_s: float) -> int:
    """Hold ``stack`` (a local or container stack: its ``failure()``) until ``stop`` is set or
    Ctrl-C, or until it no longer serves (then say why on stderr); the exit status for ``up``."""
    try:
        while not stop.wait(poll_s):
            failure = stack.failure()
            if failure:
                print(f"stopping: {failure}", file=sys.stderr, flush=True)
                return 1
    except KeyboardInterrupt:
        pass
    print("stopping...", flush=True)
    return 0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentrl_envs.cli", *args]


class LocalStack:
    def __init__(
        self,
        tasks: list[str],
        *,
        split: str | None = None,
        data: dict[str, str] | None = None,
        task_options: dict[str, dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        log_dir: str | Path | None = None,
        startup_timeout: float = 120.0,
        quiet: bool = True,
        client_token: str | None = None,
        worker_secret: str | None = None,
        insecure: bool = False,
        restart: RestartPolicy | None = RestartPolicy(),  # noqa: B008 - frozen, shared safely
        report: Callable[[str], None] | None = None,
    ) -> None:
        """``restart``: how a worker that exits is restarted (None: it is not); ``report``: where the
        supervisor's lines go (default: this module's logger, at WARNING)."""
        if not tasks:
            raise ValueError("LocalStack needs at least one task")
        self.tasks = list(dict.fromkeys(tasks))
        self.split = split
        self.data = data or {}
        self.task_options = task_options or {}
        self.host = host
        # Workers are local: they listen on loopback unless given a specific address.
        self.worker_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        # The controller's socket, bound now (so the port is known and held); its process inherits it.
        self._listen: socket.socket | None = listening_socket(host, port)
        self.port = self._listen.getsockname()[1]
        self.url = f"http://{self.worker_host}:{self.port}"
        # Passed to the processes in their environment (never their command line, which `ps` shows).
        self.client_token = client_token
        self.worker_secret = worker_secret
        self.insecure = insecure
        # A log dir we made is removed on a clean stop; one the caller named is always kept.
        self._own_log_dir = log_dir is None
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="agentrl-stack-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.startup_timeout = startup_timeout
        self.quiet = quiet
        self.processes: list[ManagedProcess] = []  # the controller first, then one worker per task
        self.restart = restart
        self.report = report or log.warning
        self.supervisor: Supervisor | None = None

    def __enter__(self) -> LocalStack:
        try:
            self.start()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(keep_logs=exc_type is not None)

    def start(self) -> None:
        from .transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV

        # Workers never see the client token (a task's code, or a sandbox escaping it, could
        # read it from their environment); they get the worker secret, the controller both.
        worker_env = {k: v for k, v in os.environ.items() if k != CLIENT_TOKEN_ENV}
        worker_env.update({"PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())})
        if self.worker_secret:
            worker_env[WORKER_SECRET_ENV] = self.worker_secret
        env = dict(worker_env)
        if self.client_token:
            env[CLIENT_TOKEN_ENV] = self.client_token
        elif CLIENT_TOKEN_ENV in os.environ:
            env[CLIENT_TOKEN_ENV] = os.environ[CLIENT_TOKEN_ENV]
        level = ["--log-level", "warning"] if self.quiet else []
        level += ["--insecure"] if self.insecure else []
        # Every server inherits its listening socket (``--fd``; ``--port`` names it in URLs and is
        # what a restarted worker binds): no port changes hands between choosing and binding it.
        listen = self._listen or listening_socket(self.host, self.port)
        self._listen = None
        self.processes.append(
            ManagedProcess(
                "controller",
                _cli("controller", "--host", self.host, "--port", str(self.port), *level),
                self.log_dir / "controller.log",
                env,
                listen=listen,
            )
        )
        for task in self.tasks:
            sock = listening_socket(self.worker_host)
            port = str(sock.getsockname()[1])
            args = ["worker", task, "--controller", self.url, "--host", self.worker_host, "--port", port, *level]
            args += worker_args(split=self.split, data=self.data.get(task), options=self.task_options.get(task))
            self.processes.append(
                ManagedProcess(f"worker-{task}", _cli(*args), self.log_dir / f"worker-{task}.log", worker_env, listen=sock)
            )
        self._wait_ready()
        if self.restart is not None:
            self.supervisor = Supervisor(self.restart, self.report)
            for i, p in enumerate(self.processes[1:], start=1):
                self.supervisor.watch(p.name, p, lambda i=i: self._restart_worker(i))
            self.supervisor.start()

    def _restart_worker(self, i: int) -> ManagedProcess:
        """Worker ``i`` of :attr:`processes` again, on the same port (its log goes on in the same file)."""
        old = self.processes[i]
        self.processes[i] = new = old.restarted(f"restarted by the stack's supervisor at {time.strftime('%H:%M:%S')}")
        return new

    def failure(self) -> str | None:
        """Why this stack no longer serves: its controller exited, or a worker was given up after
        repeated exits (None while it serves; a worker waiting to be restarted is not a failure).
        Without a restart policy, any exited process."""
        controller = self.processes[0] if self.processes else None
        if controller is not None and not controller.alive():
            return f"the controller exited ({describe_exit(controller.proc.returncode)}); see {controller.log_path}"
        if self.supervisor is not None:
            return self.supervisor.failure
        dead = [p.name for p in self.processes if not p.alive()]
        return f"{', '.join(dead)} exited (see {self.log_dir})" if dead else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pending = set(self.tasks)
        from .transport.auth import bearer

        with httpx.Client(timeout=2.0, headers=bearer(self.client_token)) as http:
            while pending:
                for p in self.processes:
                    if not p.alive():
                        raise InfrastructureError(
                            f"{p.name} exited with code {p.proc.returncode} during start-up:\n{p.log_tail()}"
                        )
                pending = tasks_without_live_worker(http, self.url, self.tasks)
                if pending and time.monotonic() > deadline:
                    tails = "\n".join(f"--- {p.name}\n{p.log_tail(10)}" for p in self.processes)
                    raise InfrastructureError(f"tasks {sorted(pending)} not live after {self.startup_timeout:.0f} s:\n{tails}")
                if pending:
                    time.sleep(0.2)

    def stop(self, keep_logs: bool = False) -> None:
        if self._listen is not None:  # never started
            self._listen.close()
            self._listen = None
        if self.supervisor is not None:  # first: nothing is restarted while the stack stops
            self.supervisor.stop()
            self.supervisor = None
        # Workers first, so they do not beat against a dead controller while stopping.
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()
        if self._own_log_dir and not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)
