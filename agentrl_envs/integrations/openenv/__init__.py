"""OpenEnv, both ways (openenv-core from PyPI: ``pip install 'agentrl-envs[openenv]'``; docs/openenv.md).

* :mod:`.serve` — any of our tasks served as an OpenEnv environment: ``agentrl-envs openenv serve
  TASK``, or :func:`~agentrl_envs.integrations.openenv.serve.create_openenv_app`;
* :mod:`.task` — any OpenEnv environment (an OpenEnv server: a container or a local process) run
  as a task behind our controller: ``agentrl-envs worker openenv --option url=URL``, or
  :func:`~agentrl_envs.integrations.openenv.task.openenv_task` for a task class of its tools.

The submodules import openenv-core (which takes seconds to import) only when used.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_arguments(sp: argparse.ArgumentParser, data_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """``agentrl-envs openenv serve TASK ...`` (the CLI's parser; ``data_args`` adds --split/--data/--option)."""
    sub = sp.add_subparsers(dest="openenv_command", required=True)
    serve = sub.add_parser("serve", help="serve TASK as an OpenEnv environment (openenv-core's HTTP + WebSocket protocol)")
    serve.add_argument("task")
    data_args(serve)
    serve.add_argument("--controller", help="play the task's sessions through this controller instead of in this process")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--max-sessions", type=int, default=64, help="concurrent WebSocket sessions (openenv's max_concurrent_envs)"
    )
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument(
        "--insecure", action="store_true", help="listen beyond loopback (OpenEnv's protocol has no authentication)"
    )


def command(a: argparse.Namespace) -> int:
    """Run ``agentrl-envs openenv serve``."""
    from ...errors import AgentRLEnvsError
    from ...task_info import task_options
    from ...transport.auth import is_loopback

    if not is_loopback(a.host) and not a.insecure:
        raise AgentRLEnvsError(f"OpenEnv's protocol has no authentication: serving on {a.host} needs --insecure")
    import uvicorn

    from .serve import create_openenv_app

    options: dict[str, Any] = task_options(a.task, a.option) if a.option else {}
    app = create_openenv_app(
        a.task, controller=a.controller, split=a.split, data=a.data, options=options, max_sessions=a.max_sessions
    )
    print(f"OpenEnv environment {a.task!r} at http://{a.host}:{a.port} (WebSocket sessions at /ws)", flush=True)
    uvicorn.run(app, host=a.host, port=a.port, log_level=a.log_level, ws="websockets-sansio")
    return 0
