"""Running a server: uvicorn with the protocol of :mod:`.http11`, set up for thousands of
keep-alive agent connections."""

from __future__ import annotations

from typing import Any

from ..errors import AgentRLEnvsError
from .http11 import HttpLimits, http_protocol
from .routes import FastRoutes


def raise_fd_limit(reserve: int) -> int:
    """Raise the soft limit on open files to the hard one; return how many client connections to
    admit, keeping ``reserve`` descriptors (at most a quarter) for everything else."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(16, soft - min(reserve, soft // 4))


def tune_gc_for_serving() -> None:
    """Freeze what start-up allocated (modules, app, schemas) out of the collector's sight and
    collect the young generation less often: full collections over 10,000 sessions' objects were
    a quarter of the worker's CPU per step (docs/performance.md)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def run_server(
    app: Any,
    host: str,
    port: int,
    log_level: str,
    *,
    reserve_fds: int = 512,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    limits: HttpLimits | None = None,
    fd: int | None = None,
) -> None:
    """Serve ``app`` with uvicorn, set up for thousands of keep-alive agent connections; HTTPS
    when given a certificate and its key (PEM files). ``fd``: serve on this inherited listening
    socket (``agentrl-envs controller|worker --fd N``, as :class:`~agentrl_envs.stack.LocalStack`
    starts them) instead of binding ``host:port``."""
    import uvicorn

    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise AgentRLEnvsError("HTTPS needs both --ssl-certfile and --ssl-keyfile")
    connections = raise_fd_limit(reserve_fds)
    print(f"admitting up to {connections} connections (then 503; raise `ulimit -n` for more)", flush=True)
    tune_gc_for_serving()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http=http_protocol(connections, app if isinstance(app, FastRoutes) else None, limits=limits),
        timeout_keep_alive=75,
        # Thousands of agents connect at once when a run starts; the kernel caps this at
        # net.core.somaxconn.
        backlog=16384,
        # Nothing sits in front of these servers; the headers cost CPU on every response.
        proxy_headers=False,
        server_header=False,
        date_header=False,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
    serve_config(config, fd)


def serve_config(config: Any, fd: int | None = None) -> None:
    """Serve a ``uvicorn.Config`` until interrupted, as ``uvicorn.run`` does (no reload, one
    process), on the inherited listening socket ``fd`` when given (``--fd N``) instead of binding
    the config's host and port; exit 3 if the server did not start (e.g. the port is taken)."""
    import socket
    import sys

    import uvicorn

    # uvicorn.run cannot take an inherited TCP socket: its fd= opens it as AF_UNIX.
    # socket(fileno=) reads the family from the descriptor.
    sockets = None
    if fd is not None:
        sock = socket.socket(fileno=fd)
        sock.set_inheritable(False)  # not into a task's subprocesses (the OS task's sandbox)
        sockets = [sock]
    server = uvicorn.Server(config)
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    if not server.started:
        sys.exit(3)  # uvicorn's exit code when start-up fails
