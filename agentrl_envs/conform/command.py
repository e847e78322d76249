"""The ``agentrl-envs conform`` command: its arguments and what it prints.

    agentrl-envs conform --controller URL --task NAME [--idle-timeout S] [options]
    agentrl-envs conform --image IMAGE [--task NAME] [options] [-- worker arguments]

Exit status: 0 when no check failed (skipped ones say why), 1 when one did.
"""

from __future__ import annotations

import argparse
import json

from ..errors import AgentRLEnvsError
from .checks import CHECKS, PROTOCOL_CHECKS, WireOptions


def add_arguments(sp: argparse.ArgumentParser) -> None:
    where = sp.add_mutually_exclusive_group(required=True)
    where.add_argument("--controller", help="a controller serving the task, e.g. http://127.0.0.1:5020")
    where.add_argument(
        "--image", help="a worker image: started as `up --backend docker` starts one, against a controller of this command"
    )
    sp.add_argument("--task", help="the task's name (with --image: default, the one the image registers)")
    sp.add_argument(
        "--checks",
        help=f"comma-separated checks (default: all: {','.join(CHECKS)}); 'protocol' for {','.join(PROTOCOL_CHECKS)}",
    )
    defaults = WireOptions()
    sp.add_argument(
        "--idle-timeout", type=float, help="the controller's idle timeout in s (unset: idle_expiry skipped; --image: 4)"
    )
    sp.add_argument("--worker-idle-timeout", type=float, help="the worker's own idle timeout in s, if it has one")
    sp.add_argument(
        "--turn-limit", type=int, help="the task's round limit, if known (else the end is awaited up to --max-rounds)"
    )
    sp.add_argument("--max-rounds", type=int, default=defaults.max_rounds, help="rounds the turn-limit check plays at most")
    sp.add_argument("--max-fill", type=int, default=defaults.max_fill, help="sessions the capacity check opens at most")
    sp.add_argument(
        "--settle", type=float, default=defaults.settle, help="seconds a cancel or expiry may take to reach the worker"
    )
    sp.add_argument("--split", help="the split of a task installed here whose reference_policy replays (default: its first)")
    sp.add_argument("--limit", type=int, help="replay at most this many references a worker offers")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument("worker_args", nargs=argparse.REMAINDER, help="with --image: arguments after `--` go to the image")


def main(a: argparse.Namespace) -> int:
    checks = None
    if a.checks:
        checks = [c for part in a.checks.split(",") if part for c in (PROTOCOL_CHECKS if part == "protocol" else [part])]
        unknown = [c for c in checks if c not in CHECKS]
        if unknown:
            raise AgentRLEnvsError(f"unknown checks {unknown}; the checks are {', '.join(CHECKS)} (or 'protocol')")
    options = WireOptions(
        idle_timeout=a.idle_timeout,
        worker_idle_timeout=a.worker_idle_timeout,
        turn_limit=a.turn_limit,
        max_rounds=a.max_rounds,
        max_fill=a.max_fill,
        settle=a.settle,
        split=a.split,
        limit=a.limit,
    )
    worker_args = a.worker_args[1:] if a.worker_args[:1] == ["--"] else a.worker_args
    if a.image:
        from .image import conform_image

        report = conform_image(a.image, task=a.task, options=options, checks=checks, worker_args=worker_args)
    else:
        if not a.task:
            raise AgentRLEnvsError("--controller needs --task NAME")
        if worker_args:
            raise AgentRLEnvsError("arguments after -- go to an image: only with --image")
        from .run import run_conformance

        report = run_conformance(a.controller, a.task, options=options, checks=checks)
    print(json.dumps(report.to_json(), indent=2) if a.json else report.text())
    return 0 if report.passed else 1
