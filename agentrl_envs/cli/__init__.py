"""The ``agentrl-envs`` command line.

    agentrl-envs controller [--host H] [--port P]
    agentrl-envs worker TASK [--controller URL] [--split S | --data PATH] [--option K=V ...]
    agentrl-envs up [--tasks db,os] [--split S]          controller + one worker per task (restarted if they exit); Ctrl-C stops all
    agentrl-envs up --backend docker [--tasks db,os]      the same as containers (images from `build`)
    agentrl-envs build [TASK ...]                         base, controller and worker images, built locally
    agentrl-envs list                                     tasks, splits, sizes
    agentrl-envs describe TASK [--json]                   a task's splits, limits, tools and options
    agentrl-envs check TASK [--split S | --data PATH] [--json] [--min-rate R]
    agentrl-envs eval --tasks db[,os] [--split dev] [--limit N] [--runs K] [--model M[,M2]] [--base-url URL] ...
    agentrl-envs eval --resume DIR                        finish an interrupted run
    agentrl-envs eval-report DIR [DIR ...] [--output OUT] runs side by side (text and HTML)
    agentrl-envs serve-model [--host H] [--port P] [--model PATH] [--max-batch N] [--max-tokens-limit N] ...
    agentrl-envs new NAME [--dir PATH] [--container]      a new task package (envs/NAME) that passes the conformance suite
    agentrl-envs conform --controller URL --task NAME     the conformance suite over the wire (or --image IMAGE)

Task options (``--option K=V``) may also come from the environment as ``AGENTRL_<TASK>_<K>``,
e.g. ``AGENTRL_DB_BACKEND=mysql``; the command line wins (:mod:`agentrl_envs.task_info`).
Servers, authentication and TLS: :mod:`.servers`; task commands: :mod:`.tasks`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..errors import AgentRLEnvsError
from ..task_info import describe_task, task_options
from . import servers, tasks
from .arguments import data_args

__all__ = ["build_parser", "describe_task", "main", "task_options"]


def eval_arguments(sp: argparse.ArgumentParser) -> None:
    from ..eval import add_arguments

    add_arguments(sp)


def cmd_eval(a: argparse.Namespace) -> int:
    from ..eval import main as eval_main

    return eval_main(a)


def eval_report_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("dirs", nargs="+", metavar="DIR", help="output directories of eval runs")
    sp.add_argument("--output", help="where comparison.txt, .html and .json go (default: eval_comparison)")


def cmd_eval_report(a: argparse.Namespace) -> int:
    from ..eval import eval_report

    eval_report(a.dirs, a.output)
    return 0


def openenv_arguments(sp: argparse.ArgumentParser) -> None:
    from ..integrations.openenv import add_arguments

    add_arguments(sp, data_args)


def cmd_openenv(a: argparse.Namespace) -> int:
    from ..integrations.openenv import command

    return command(a)


def conform_arguments(sp: argparse.ArgumentParser) -> None:
    from ..conformance.wire.command import add_arguments

    add_arguments(sp)


def cmd_conform(a: argparse.Namespace) -> int:
    from ..conformance.wire.command import main as conform_main

    return conform_main(a)


Adder = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]

#: Every subcommand, in the order ``--help`` lists them: (name, help, its arguments, what it runs).
COMMANDS: list[tuple[str, str, Adder, Command]] = [
    ("controller", "run the controller", servers.controller_arguments, servers.cmd_controller),
    ("worker", "run a worker serving one task", servers.worker_arguments, servers.cmd_worker),
    (
        "up",
        "start a controller and one worker per task as local processes",
        servers.up_arguments,
        servers.cmd_up,
    ),
    (
        "build",
        "build the base, controller and worker images locally (needs a Docker engine)",
        servers.build_arguments,
        servers.cmd_build,
    ),
    ("list", "list installed tasks, their splits and sizes", tasks.list_arguments, tasks.cmd_list),
    (
        "describe",
        "a task's splits, limits, tools and options (--option KEY=VALUE)",
        tasks.describe_arguments,
        tasks.cmd_describe,
    ),
    (
        "check",
        "replay every sample's reference solution; exit 1 below --min-rate",
        tasks.check_arguments,
        tasks.cmd_check,
    ),
    ("eval", "evaluate an OpenAI-compatible model on tasks", eval_arguments, cmd_eval),
    (
        "eval-report",
        "compare eval runs side by side (tasks as rows; text and HTML)",
        eval_report_arguments,
        cmd_eval_report,
    ),
    (
        "serve-model",
        "serve the built-in model (SmolLM2-135M-Instruct) over an OpenAI-compatible API",
        servers.serve_model_arguments,
        servers.cmd_serve_model,
    ),
    (
        "new",
        "write a new task package that passes the conformance suite as generated",
        tasks.new_arguments,
        tasks.cmd_new,
    ),
    ("openenv", "OpenEnv: serve a task as an OpenEnv environment (docs/openenv.md)", openenv_arguments, cmd_openenv),
    (
        "conform",
        "the conformance suite over the wire: a task behind a controller, or a worker image",
        conform_arguments,
        cmd_conform,
    ),
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentrl-envs", description="Multi-turn tool-calling tasks behind an AgentRL-compatible controller."
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_, add_arguments, command in COMMANDS:
        sp = sub.add_parser(name, help=help_)
        add_arguments(sp)
        sp.set_defaults(func=command)
    return p


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # Turn SIGTERM into SystemExit so `with LocalStack(...)` / `with LocalModelServer()` blocks
    # unwind and stop the processes they started (they run in sessions of their own).
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from ..stack import exit_with_parent

    exit_with_parent()  # started by a LocalStack: end with it
    logging.basicConfig(
        level=getattr(args, "log_level", "warning").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.func(args)
    except AgentRLEnvsError as e:
        print(f"agentrl-envs: error: {e.message}", file=sys.stderr)
        return 2
