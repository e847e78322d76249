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
import typing
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

from ..errors import AgentRLEnvsError
from .config import EvalConfig
from .report import print_table, summarize, write_outputs
from .runner import EvalResult, evaluate

DEFAULT_OUTPUT = Path("eval_results")

_FLAG_TYPES: dict[str, type] = {"int": int, "float": float}


def _flag_type(hint: Any) -> type:
    """``int | None`` → int, ``float`` → float, anything else → str (lists are comma-separated)."""
    names = {getattr(a, "__name__", str(a)) for a in (typing.get_args(hint) or (hint,))} - {"NoneType"}
    return _FLAG_TYPES.get(next(iter(names)), str) if len(names) == 1 else str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per :class:`EvalConfig` field (``--max-tokens`` for ``max_tokens``...).

    Every flag defaults to ``None`` so :meth:`EvalConfig.from_args` keeps the dataclass default;
    ``--option TASK.KEY=VALUE`` (repeatable) fills ``task_options``; ``--no-progress`` hides the bars.
    """
    hints = typing.get_type_hints(EvalConfig)
    for f in dataclasses.fields(EvalConfig):
        if f.name in ("task_options", "progress"):
            continue
        default = (
            "required"
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            else f"default: {f.default}"
        )
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_flag_type(hints[f.name]),
            default=None,
            required=f.name == "tasks",
            help=f"{f.metadata.get('help', '')} ({default})",
        )
    parser.add_argument(
        "--option",
        dest="option",
        action="append",
        metavar="TASK.KEY=VALUE",
        help="task option for the embedded stack, repeatable",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="hide the progress bars")


def parse_options(pairs: list[str] | None) -> dict[str, dict[str, str]]:
    """``["db.backend=sqlite"]`` → ``{"db": {"backend": "sqlite"}}``; a malformed pair raises ValueError."""
    options: dict[str, dict[str, str]] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        task, dot, name = key.partition(".")
        if not (sep and dot and task and name):
            raise ValueError(f"--option {pair!r}: expected TASK.KEY=VALUE, e.g. db.backend=sqlite")
        options.setdefault(task, {})[name] = value
    return options


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
            try:
                from ..models.launch import LocalModelServer
            except ImportError as e:
                raise AgentRLEnvsError(
                    f"the built-in model server is unavailable ({e}); pass --base-url, or install agentrl-envs[local]"
                ) from None
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
    infrastructure failures (the files are written either way). A bad option raises
    :class:`~agentrl_envs.errors.AgentRLEnvsError` with a message for the user.
    """
    values = dict(vars(args) if isinstance(args, argparse.Namespace) else args)
    try:
        options = parse_options(values.pop("option", None))
        if options:
            values["task_options"] = {**(values.get("task_options") or {}), **options}
        config = EvalConfig.from_args(values)
    except ValueError as e:
        raise AgentRLEnvsError(f"eval: {e}") from None
    result = run(config)
    return 0 if all(ep.scored for ep in result.episodes) else 3


main = run_eval
