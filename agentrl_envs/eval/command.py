"""``agentrl-envs eval`` end to end: embedded services when needed, the run, the files, the table.

Without ``--controller`` the embedded stack (:class:`agentrl_envs.stack.LocalStack`: a controller
and one worker per task as local subprocesses) is started for the run; without ``--base-url`` the
built-in model server (:class:`agentrl_envs.models.launch.LocalModelServer`, SmolLM2-135M-Instruct
on the CPU, API key ``EMPTY``). Both are stopped when the run ends, however it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

from .config import EvalConfig
from .report import print_table, summarize, write_outputs
from .runner import EvalResult, evaluate

DEFAULT_OUTPUT = Path("eval_results")


@contextmanager
def embedded_services(config: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``config`` with ``controller`` and ``base_url`` filled in, starting what is missing.

    The services live until the ``with`` block exits. Nothing is started for a field already set.
    """
    with ExitStack() as stack:
        changes: dict[str, Any] = {}
        if config.controller is None:
            from ..stack import LocalStack

            kwargs: dict[str, Any] = {"tasks": list(config.tasks), "task_options": dict(config.task_options)}
            if config.split is not None:
                kwargs["split"] = config.split
            changes["controller"] = stack.enter_context(LocalStack(**kwargs)).url
        if config.base_url is None:
            from ..models.launch import LocalModelServer

            changes["base_url"] = stack.enter_context(LocalModelServer()).base_url
            changes["api_key"] = "EMPTY"
        yield dataclasses.replace(config, **changes)


def run(config: EvalConfig, *, output: str | Path | None = None, file: TextIO | None = None) -> EvalResult:
    """Run one evaluation synchronously: embedded services, :func:`evaluate`, the three files, the table.

    ``output`` (default ``config.output``, else ``./eval_results``) receives summary.json,
    trajectories.jsonl and report.html; the table goes to ``file`` (default stdout).
    """
    out = Path(output or config.output or DEFAULT_OUTPUT)
    with embedded_services(config) as live:
        result = asyncio.run(evaluate(live))
    paths = write_outputs(result, out)
    stream = file or sys.stdout
    print_table(summarize(result), file=stream)
    print(f"wrote {paths['summary']}, {paths['trajectories']}, {paths['report']}", file=stream)
    return result


def run_eval(args: argparse.Namespace | Mapping[str, Any]) -> int:
    """The CLI entry: ``args`` holds EvalConfig's fields by name (``tasks`` may be ``"db,os"``).

    Returns the process exit code: 0 when every episode was scored, 3 when some episodes are
    infrastructure failures (the files are written either way).
    """
    result = run(EvalConfig.from_args(args))
    return 0 if all(ep.scored for ep in result.episodes) else 3
