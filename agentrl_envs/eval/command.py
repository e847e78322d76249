"""``agentrl-envs eval`` end to end: embedded services when needed, the run, the files, the table.

Without ``--controller`` the embedded stack (:class:`agentrl_envs.stack.LocalStack`: a controller
and one worker per task as local subprocesses) is started for the run; without ``--base-url`` the
built-in model server (:class:`agentrl_envs.models.launch.LocalModelServer`, SmolLM2-135M-Instruct
on the CPU, API key ``EMPTY``). Both are stopped when the run ends, however it ends.

The output directory records the run as it goes (:mod:`agentrl_envs.eval.store`). A run that
was interrupted is finished with ``--resume DIR``: the saved config is reused, flags that would
change what is measured (:data:`~agentrl_envs.eval.config.RUN_DEFINING`) are refused, others
(``--concurrency``, ``--controller``, ``--base-url``...) are taken. A new run is refused in a
directory holding an unfinished one.
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
from .config import RUN_DEFINING, EvalConfig
from .report import print_table, summarize, write_outputs
from .results import EvalResult
from .runner import evaluate
from .store import RunStore, is_unfinished, read_config

DEFAULT_OUTPUT = Path("eval_results")

_FLAG_TYPES: dict[str, type] = {"int": int, "float": float}


def _flag_type(hint: Any) -> type:
    """``int | None`` → int, ``float`` → float, anything else → str (lists are comma-separated)."""
    names = {getattr(a, "__name__", str(a)) for a in (typing.get_args(hint) or (hint,))} - {"NoneType"}
    return _FLAG_TYPES.get(next(iter(names)), str) if len(names) == 1 else str


def _is_list(hint: Any) -> bool:
    return any(typing.get_origin(a) is list for a in (typing.get_args(hint) or (hint,))) or typing.get_origin(hint) is list


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per :class:`EvalConfig` field (``--max-tokens`` for ``max_tokens``...).

    Every flag defaults to ``None`` so :meth:`EvalConfig.from_args` keeps the dataclass default.
    List fields (``--tasks``, ``--model``, ``--base-url``, ``--api-key``) take comma-separated
    values and may be repeated. ``--option TASK.KEY=VALUE`` (repeatable) fills ``task_options``;
    ``--no-progress`` hides the bars; ``--resume DIR`` finishes an interrupted run.
    """
    hints = typing.get_type_hints(EvalConfig)
    for f in dataclasses.fields(EvalConfig):
        if f.name in ("task_options", "progress"):
            continue
        if f.name == "tasks":
            default = "required, unless --resume"
        elif f.default_factory is not dataclasses.MISSING:
            default = "default: none"
        else:
            default = f"default: {f.default}"
        repeatable = _is_list(hints[f.name])
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_flag_type(hints[f.name]),
            action="append" if repeatable else "store",
            default=None,
            help=f"{f.metadata.get('help', '')} ({default}{'; repeatable' if repeatable else ''})",
        )
    parser.add_argument(
        "--option",
        dest="option",
        action="append",
        metavar="TASK.KEY=VALUE",
        help="task option for the embedded stack, repeatable",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="hide the progress bars")
    parser.add_argument(
        "--resume",
        dest="resume",
        metavar="DIR",
        default=None,
        help="finish the interrupted run recorded in DIR: its config is reused, its scored episodes are kept, "
        "the missing ones and its infrastructure failures are played",
    )


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
            changes["base_url"] = [stack.enter_context(LocalModelServer(dtype=config.model_dtype)).base_url]
            changes["api_key"] = ["EMPTY"]
        yield dataclasses.replace(config, **changes)


def run(config: EvalConfig, *, output: str | Path | None = None, file: TextIO | None = None, resume: bool = False) -> EvalResult:
    """Run one evaluation synchronously: embedded services, :func:`evaluate`, the files, the table.

    ``output`` (default ``config.output``, else ``./eval_results``) receives config.json and
    trajectories.jsonl as the run goes, then summary.json and report.html; the table goes to
    ``file`` (default stdout). ``resume``: finish the run recorded in ``output`` (``config``
    must be the saved one: see :func:`resume_config`).
    """
    out = Path(output or config.output or DEFAULT_OUTPUT)
    stream = file or sys.stdout
    if not resume and is_unfinished(out):
        raise AgentRLEnvsError(
            f"{out} holds an unfinished run: finish it with `agentrl-envs eval --resume {out}`, "
            "or delete it (or pass another --output) to start over"
        )
    store = RunStore(out, config, resume=resume)
    try:
        with embedded_services(config) as live:
            result = asyncio.run(evaluate(live, store=store))
    except (KeyboardInterrupt, SystemExit):
        if store.trajectories.exists():
            print(f"\ninterrupted: finish the run with `agentrl-envs eval --resume {out}`", file=sys.stderr)
        raise
    finally:
        store.close()
    paths = write_outputs(result, out)
    print_table(summarize(result), file=stream)
    if result.resumed:
        print(
            f"resumed: {result.resumed} episodes were already scored, {len(result.episodes) - result.resumed} played now",
            file=stream,
        )
    print(f"wrote {paths['summary']}, {paths['trajectories']}, {paths['report']}", file=stream)
    return result


def resume_config(directory: str | Path, given: Mapping[str, Any]) -> EvalConfig:
    """The saved config of the run in ``directory`` with the values in ``given`` (flags the user
    passed) applied; :class:`AgentRLEnvsError` when one would change what the run measures."""
    saved_values = read_config(directory)["config"]
    try:
        saved = EvalConfig.from_args(saved_values)
        merged = EvalConfig.from_args({**saved_values, **{k: v for k, v in given.items() if v is not None}})
    except ValueError as e:
        raise AgentRLEnvsError(f"eval --resume {directory}: {e}") from None
    conflicts = [
        f"--{name.replace('_', '-')} {getattr(merged, name)!r} (the run has {getattr(saved, name)!r})"
        for name in RUN_DEFINING
        if getattr(merged, name) != getattr(saved, name)
    ]
    if conflicts:
        raise AgentRLEnvsError(f"eval --resume {directory}: a resumed run keeps what it measures; drop " + "; ".join(conflicts))
    if merged.output is not None and Path(merged.output).resolve() != Path(directory).resolve():
        raise AgentRLEnvsError(f"eval --resume {directory}: --output {merged.output} is another directory")
    return dataclasses.replace(merged, output=Path(directory))


def run_eval(args: argparse.Namespace | Mapping[str, Any]) -> int:
    """The CLI entry: ``args`` holds EvalConfig's fields by name (``tasks`` may be ``"db,os"``),
    plus ``option`` (``TASK.KEY=VALUE`` pairs) and ``resume`` (a run directory).

    Returns the process exit code: 0 when every episode was scored, 3 when some episodes are
    infrastructure failures (the files are written either way), 130 after Ctrl-C. A bad option raises
    :class:`~agentrl_envs.errors.AgentRLEnvsError` with a message for the user.
    """
    values = dict(vars(args) if isinstance(args, argparse.Namespace) else args)
    resume = values.pop("resume", None)
    try:
        options = parse_options(values.pop("option", None))
        if options:
            values["task_options"] = {**(values.get("task_options") or {}), **options}
        if resume is not None:
            config = resume_config(resume, values)
        elif not values.get("tasks"):
            raise ValueError("--tasks is required (unless --resume DIR)")
        else:
            config = EvalConfig.from_args(values)
    except ValueError as e:
        raise AgentRLEnvsError(f"eval: {e}") from None
    try:
        result = run(config, resume=resume is not None)
    except KeyboardInterrupt:
        return 130  # run() said how to finish the run
    return 0 if all(ep.scored for ep in result.episodes) else 3


main = run_eval
