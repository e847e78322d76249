"""The ``agentrl-envs conform`` command: its arguments and what it prints.

    agentrl-envs conform --controller URL --task NAME [--idle-timeout S] [options]
    agentrl-envs conform --image IMAGE [--task NAME] [options] [-- worker arguments]

Exit status: 0 when no check failed (skipped ones say why), 1 when one did.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing

from ...errors import AgentRLEnvsError
from .checks import CHECKS, PROTOCOL_CHECKS
from .options import WireOptions


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
    hints = typing.get_type_hints(WireOptions)
    for f in dataclasses.fields(WireOptions):
        kind = next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
        sp.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default, help=f.metadata["help"])
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument("worker_args", nargs=argparse.REMAINDER, help="with --image: arguments after `--` go to the image")


def main(a: argparse.Namespace) -> int:
    checks = None
    if a.checks:
        checks = [c for part in a.checks.split(",") if part for c in (PROTOCOL_CHECKS if part == "protocol" else [part])]
        unknown = [c for c in checks if c not in CHECKS]
        if unknown:
            raise AgentRLEnvsError(f"unknown checks {unknown}; the checks are {', '.join(CHECKS)} (or 'protocol')")
    try:
        options = WireOptions(**{f.name: getattr(a, f.name) for f in dataclasses.fields(WireOptions)})
    except ValueError as e:
        raise AgentRLEnvsError(str(e)) from None
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
