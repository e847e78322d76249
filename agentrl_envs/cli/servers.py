"""The commands that run servers: ``controller``, ``worker``, ``up`` (a local stack or containers),
``build`` (the images) and ``serve-model`` (the built-in model).

Authentication and TLS (docs/security.md): the controller takes client tokens
(``AGENTRL_CLIENT_TOKEN``, ``--client-tokens-file``) and a worker secret (``AGENTRL_WORKER_SECRET``),
the worker its secret; neither serves beyond loopback without them unless ``--insecure``;
``--ssl-certfile``/``--ssl-keyfile`` serve HTTPS, ``--ca-file`` verifies the other side's.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from ..errors import AgentRLEnvsError
from ..task_info import task_options
from .arguments import data_args, server_args


def _uvicorn_run(app: Any, host: str, port: int, log_level: str, *, reserve_fds: int = 512, a: Any = None) -> None:
    from ..transport.serve import run_server

    opts = {"ssl_certfile": a.ssl_certfile, "ssl_keyfile": a.ssl_keyfile, "fd": a.fd} if a is not None else {}
    run_server(app, host, port, log_level, reserve_fds=reserve_fds, **opts)


def _secret(value: str | None, env: str) -> str | None:
    from ..transport.auth import env_token

    return value or env_token(env)


def _insecure(a: argparse.Namespace) -> bool:
    """``--insecure``, or ``AGENTRL_INSECURE=1`` (for container images, whose command line is fixed)."""
    return bool(a.insecure) or os.environ.get("AGENTRL_INSECURE", "").strip().lower() in ("1", "true", "yes")


def _ssl_context(ca_file: str | None) -> Any:
    """What verifies the other side's certificate: ``--ca-file``, else the system store."""
    import ssl

    return ssl.create_default_context(cafile=ca_file) if ca_file else None


def controller_arguments(sp: argparse.ArgumentParser) -> None:
    server_args(sp, 5020)
    sp.add_argument(
        "--heartbeat-timeout", type=float, default=11.0, help="seconds of silence before a worker gets no new sessions"
    )
    sp.add_argument(
        "--dead-after",
        type=float,
        default=30.0,
        help="seconds without a heartbeat or an answer before a worker is probed (GET /health) and, if silent, dropped",
    )
    sp.add_argument("--idle-timeout", type=float, default=300.0, help="seconds before an idle session is cancelled")
    sp.add_argument("--interaction-timeout", type=float, default=240.0, help="seconds a worker may take over one request")
    sp.add_argument(
        "--client-token",
        action="append",
        help="a token clients must send (repeatable; prefer the environment: AGENTRL_CLIENT_TOKEN)",
    )
    sp.add_argument(
        "--client-tokens-file",
        help="per-client tokens, one a line: NAME TOKEN [admin] [max_sessions=N] [starts_per_minute=R]",
    )
    sp.add_argument("--max-sessions-per-client", type=int, help="default quota: sessions one token may hold open at once")
    sp.add_argument("--starts-per-minute-per-client", type=float, help="default quota: sessions one token may start per minute")
    sp.add_argument(
        "--worker-transport",
        choices=["auto", "http"],
        default="auto",
        help="auto: steps to workers that offer it go over one multiplexed connection per worker, others over "
        "HTTP/1.1 (AgentRL's own workers); http: HTTP/1.1 only",
    )


def cmd_controller(a: argparse.Namespace) -> int:
    from ..controller import ControllerService, create_controller_app
    from ..transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, controller_authenticator, require_auth_off_loopback

    shared = [t for t in [_secret(None, CLIENT_TOKEN_ENV), *(a.client_token or [])] if t]
    worker_secret = _secret(a.worker_secret, WORKER_SECRET_ENV)

    def tokens() -> Any:
        return controller_authenticator(
            client_tokens=shared,
            tokens_file=a.client_tokens_file,
            worker_secret=worker_secret,
            max_sessions=a.max_sessions_per_client,
            starts_per_minute=a.starts_per_minute_per_client,
        )

    auth = tokens()
    if a.client_tokens_file and auth.enabled:

        def reload(*_: Any) -> None:
            try:
                kept, added, removed = auth.replace_tokens(tokens())
            except (AgentRLEnvsError, OSError) as e:
                logging.getLogger("agentrl_envs.auth").error(
                    "SIGHUP: %s not reloaded (%s): the old tokens stay", a.client_tokens_file, e
                )
                return
            logging.getLogger("agentrl_envs.auth").warning(
                "SIGHUP: tokens reloaded from %s: %d kept, %d new, %d removed", a.client_tokens_file, kept, added, removed
            )

        signal.signal(signal.SIGHUP, reload)  # rotate tokens without a restart
    require_auth_off_loopback(
        a.host,
        auth,
        insecure=_insecure(a),
        what="controller",
        how=f"set {CLIENT_TOKEN_ENV} (or --client-tokens-file) and {WORKER_SECRET_ENV}",
    )
    if auth.enabled and not worker_secret:
        raise AgentRLEnvsError(f"client tokens without a worker secret: no worker could register; set {WORKER_SECRET_ENV}")
    service = ControllerService(
        heartbeat_timeout=a.heartbeat_timeout,
        dead_after=a.dead_after,
        idle_timeout=a.idle_timeout,
        interaction_timeout=a.interaction_timeout,
        multiplex=a.worker_transport == "auto",
        worker_secret=worker_secret,
        worker_ssl=_ssl_context(a.ca_file),
    )
    scheme = "https" if a.ssl_certfile else "http"
    state = "tokens required" if auth.enabled else "no authentication"
    print(f"controller listening on {scheme}://{a.host}:{a.port}/api ({state})", flush=True)
    # The controller also holds connections to its workers (at most UPSTREAM_MAX_CONNECTIONS each).
    _uvicorn_run(create_controller_app(service, auth=auth), a.host, a.port, a.log_level, reserve_fds=4096, a=a)
    return 0


def worker_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("task")
    server_args(sp, 5021)
    data_args(sp)
    sp.add_argument("--controller", help="controller URL to register with, e.g. http://127.0.0.1:5020/api")
    sp.add_argument(
        "--self", dest="self_address", help="this worker's URL as the controller reaches it (default http://HOST:PORT/api)"
    )
    sp.add_argument("--concurrency", type=int, help="max concurrent sessions (default: the task's)")
    sp.add_argument("--idle-timeout", type=float, default=300.0)
    sp.add_argument("--heartbeat-interval", type=float, default=8.0, help="seconds between heartbeats to the controller")


def cmd_worker(a: argparse.Namespace) -> int:
    from ..episode import TaskRuntime
    from ..integrations import task_class
    from ..worker import WorkerService, create_worker_app

    cls = task_class(a.task)
    split = a.split if a.split or a.data else (cls.splits[0] if cls.splits else None)
    runtime = TaskRuntime(cls, split=split, data=a.data, config=task_options(a.task, a.option))
    from ..transport.auth import WORKER_SECRET_ENV, require_auth_off_loopback, split_userinfo, worker_authenticator

    worker_secret = _secret(a.worker_secret, WORKER_SECRET_ENV)
    if not worker_secret and a.controller:
        worker_secret = split_userinfo(a.controller)[1]  # the secret in the controller URL's userinfo
    auth = worker_authenticator(worker_secret)
    require_auth_off_loopback(a.host, auth, insecure=_insecure(a), what="worker", how=f"set {WORKER_SECRET_ENV}")
    scheme = "https" if a.ssl_certfile else "http"
    self_address = a.self_address or f"{scheme}://{a.host}:{a.port}/api"
    service = WorkerService(
        runtime,
        concurrency=a.concurrency,
        idle_timeout=a.idle_timeout,
        controller_url=a.controller,
        self_address=self_address,
        heartbeat_interval=a.heartbeat_interval,
        worker_secret=worker_secret,
        verify=_ssl_context(a.ca_file) or True,
    )
    print(f"worker {a.task!r} ({len(runtime.indices)} samples) at {self_address}", flush=True)
    _uvicorn_run(create_worker_app(service, auth=auth), a.host, a.port, a.log_level, a=a)
    return 0


def up_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--tasks", default="db", help="comma-separated task names")
    sp.add_argument("--split")
    sp.add_argument("--option", action="append", metavar="KEY=VALUE", help="task option (single-task only)")
    sp.add_argument("--port", type=int, default=5020)
    sp.add_argument("--log-dir")
    sp.add_argument("--backend", choices=["local", "docker"], default="local", help="local processes or containers")
    sp.add_argument(
        "--host",
        default="127.0.0.1",
        help="the controller's listen address (0.0.0.0 lets other hosts join: tokens are then generated and printed)",
    )
    sp.add_argument("--insecure", action="store_true", help="beyond loopback without tokens (not recommended)")


def cmd_up(a: argparse.Namespace) -> int:
    from ..stack import LocalStack, serve_until_stopped

    tasks = [t for t in a.tasks.split(",") if t]
    options = {t: task_options(t, a.option if len(tasks) == 1 else None) for t in tasks}
    from ..transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, env_token, is_loopback, new_token

    # Beyond loopback: tokens, generated unless given in the environment, printed once.
    client_token = env_token(CLIENT_TOKEN_ENV)
    worker_secret = env_token(WORKER_SECRET_ENV)
    if not is_loopback(a.host) and not _insecure(a):
        client_token = client_token or new_token()
        worker_secret = worker_secret or new_token()

    def announce(port: int) -> None:
        if client_token and not env_token(CLIENT_TOKEN_ENV):
            print(
                f"listening on {a.host}: tokens required. Clients: {CLIENT_TOKEN_ENV}={client_token}  "
                f"(or http://agentrl:{client_token}@HOST:{port}/api)\n"
                f"workers on other hosts: {WORKER_SECRET_ENV}={worker_secret}  (keep both secret)",
                flush=True,
            )

    if a.backend == "docker":
        from ..containers.up import cmd_up_docker

        return cmd_up_docker(
            a, options, client_token=client_token, worker_secret=worker_secret, insecure=_insecure(a), announce=announce
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalStack(
        tasks,
        split=a.split,
        task_options=options,
        host=a.host,
        port=a.port,
        log_dir=a.log_dir,
        quiet=False,
        client_token=client_token,
        worker_secret=worker_secret,
        insecure=_insecure(a),
        report=lambda line: print(f"supervisor: {line}", file=sys.stderr, flush=True),
    ) as stack:
        # From here Ctrl-C only sets the flag: a KeyboardInterrupt raised inside a subprocess or
        # docker-client call could leave a lock held that the teardown then waits on forever.
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        print(f"controller: {stack.url}/api   tasks: {', '.join(tasks)}   logs: {stack.log_dir}", flush=True)
        announce(stack.port)
        print("press Ctrl-C to stop (a worker that exits is restarted)", flush=True)
        # A worker that exits is restarted by the stack's supervisor; `up` stops only when the
        # controller exits or a worker is given up after repeated exits.
        return serve_until_stopped(stack, stop, 1.0)


def build_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("tasks", nargs="*", metavar="TASK", help="tasks to build worker images for (default: all with a Dockerfile)")
    sp.add_argument(
        "--deps", choices=["host", "pypi"], default="host",
        help="dependencies: downloaded by the host's pip (default), or by pip inside the build from PyPI",
    )  # fmt: skip
    sp.add_argument("--rebuild", action="store_true", help="rebuild even if an image with the same inputs exists")


def cmd_build(a: argparse.Namespace) -> int:
    from ..containers.build import cmd_build as build

    return build(a)


def serve_model_arguments(sp: argparse.ArgumentParser) -> None:
    from ..models.launch import add_server_arguments

    add_server_arguments(sp)


def cmd_serve_model(a: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise AgentRLEnvsError(f"the model server needs the [local] extra (pip install 'agentrl-envs[local]'): {e}") from None
    from ..models.server import serve_from_args

    serve_from_args(a)
    return 0
