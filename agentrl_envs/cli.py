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
e.g. ``AGENTRL_DB_BACKEND=mysql``; the command line wins.

Authentication and TLS (docs/security.md): the controller takes client tokens
(``AGENTRL_CLIENT_TOKEN``, ``--client-tokens-file``) and a worker secret (``AGENTRL_WORKER_SECRET``),
the worker its secret; neither serves beyond loopback without them unless ``--insecure``;
``--ssl-certfile``/``--ssl-keyfile`` serve HTTPS, ``--ca-file`` verifies the other side's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import textwrap
import threading
from typing import Any

from .errors import AgentRLEnvsError


def _uvicorn_run(app: Any, host: str, port: int, log_level: str, *, reserve_fds: int = 512, a: Any = None) -> None:
    from .transport.serve import run_server

    tls = {"ssl_certfile": a.ssl_certfile, "ssl_keyfile": a.ssl_keyfile} if a is not None else {}
    run_server(app, host, port, log_level, reserve_fds=reserve_fds, **tls)


def _secret(value: str | None, env: str) -> str | None:
    from .transport.auth import env_token

    return value or env_token(env)


def _insecure(a: argparse.Namespace) -> bool:
    """``--insecure``, or ``AGENTRL_INSECURE=1`` (for container images, whose command line is fixed)."""
    return bool(a.insecure) or os.environ.get("AGENTRL_INSECURE", "").strip().lower() in ("1", "true", "yes")


def _ssl_context(ca_file: str | None) -> Any:
    """What verifies the other side's certificate: ``--ca-file``, else the system store."""
    import ssl

    return ssl.create_default_context(cafile=ca_file) if ca_file else None


def option_env_var(task: str, key: str) -> str:
    """The environment variable that sets option ``key`` of ``task``: ``AGENTRL_<TASK>_<KEY>``."""
    return f"AGENTRL_{task.upper().replace('-', '_')}_{key.upper()}"


def split_sizes(cls: Any) -> dict[str, Any]:
    """Samples per split of a task class; a split that fails to load shows its error."""
    sizes: dict[str, Any] = {}
    for split in cls.splits:
        try:
            sizes[split] = len(cls.load_samples(split=split))
        except Exception as e:  # a broken split must not hide the others
            sizes[split] = f"error: {e}"
    return sizes


def task_options(task: str, pairs: list[str] | None) -> dict[str, Any]:
    """Options for ``task`` from ``AGENTRL_<TASK>_<KEY>`` env vars, then ``K=V`` pairs."""
    from .integrations import task_class

    fields = task_class(task).Config.model_fields
    env = {k: option_env_var(task, k) for k in fields}
    options: dict[str, Any] = {k: os.environ[v] for k, v in env.items() if v in os.environ}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise AgentRLEnvsError(f"--option expects KEY=VALUE, got {pair!r}")
        if key not in fields:
            raise AgentRLEnvsError(f"task {task!r} has no option {key!r}; its options are {sorted(fields) or 'none'}")
        options[key] = value
    return options


# ---------------------------------------------------------------------------- commands


def cmd_controller(a: argparse.Namespace) -> int:
    from .controller import ControllerService, create_controller_app
    from .transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, controller_authenticator, require_auth_off_loopback

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


def cmd_worker(a: argparse.Namespace) -> int:
    from .episode import TaskRuntime
    from .integrations import task_class
    from .worker import WorkerService, create_worker_app

    cls = task_class(a.task)
    split = a.split if a.split or a.data else (cls.splits[0] if cls.splits else None)
    runtime = TaskRuntime(cls, split=split, data=a.data, config=task_options(a.task, a.option))
    from .transport.auth import WORKER_SECRET_ENV, require_auth_off_loopback, split_userinfo, worker_authenticator

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


def cmd_up(a: argparse.Namespace) -> int:
    from .stack import LocalStack

    tasks = [t for t in a.tasks.split(",") if t]
    options = {t: task_options(t, a.option if len(tasks) == 1 else None) for t in tasks}
    from .transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV, env_token, is_loopback, new_token

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
        from .containers.up import cmd_up_docker

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
        try:
            while not stop.wait(1.0):
                # A worker that exits is restarted by the stack's supervisor; `up` stops only when
                # the controller exits or a worker is given up after repeated exits.
                failure = stack.failure()
                if failure:
                    print(f"stopping: {failure}", file=sys.stderr, flush=True)
                    return 1
        except KeyboardInterrupt:
            pass
        print("stopping...", flush=True)
    return 0


def cmd_build(a: argparse.Namespace) -> int:
    from .containers.build import cmd_build as build

    return build(a)


def cmd_list(a: argparse.Namespace) -> int:
    from .registry import get_task, task_names

    rows = []
    for name in task_names():
        cls = get_task(name)
        for split, size in (split_sizes(cls) or {"-": "-"}).items():
            rows.append(
                {"task": name, "split": split, "samples": size, "max_turns": cls.max_turns, "tools": list(cls.tool_specs())}
            )
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'task':<12}{'split':<10}{'samples':>8}  {'turns':>5}  tools")
    for r in rows:
        print(f"{r['task']:<12}{r['split']:<10}{r['samples']!s:>8}  {r['max_turns']:>5}  {', '.join(r['tools'])}")
    return 0


def describe_task(name: str) -> dict[str, Any]:
    """What a user needs to run task ``name``: its splits and sizes, limits, tools and options."""
    import inspect

    from .registry import get_task

    cls = get_task(name)
    options = []
    for key, field in cls.Config.model_fields.items():
        kind = field.annotation.__name__ if isinstance(field.annotation, type) else str(field.annotation)
        options.append(
            {
                "name": key,
                "type": kind.replace("typing.", ""),
                "default": None if field.is_required() else field.get_default(call_default_factory=True),
                "required": field.is_required(),
                "description": field.description or "",
                "env": option_env_var(name, key),
            }
        )
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    return {
        "task": name,
        "module": cls.__module__,
        "summary": doc.split("\n\n")[0].replace("\n", " ").replace("``", "`"),
        "splits": split_sizes(cls),
        "max_turns": cls.max_turns,
        "concurrency": cls.concurrency,
        "tools": cls.tool_definitions(),
        "options": options,
    }


def cmd_describe(a: argparse.Namespace) -> int:
    info = describe_task(a.task)
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(f"{info['task']}  ({info['module']})")
    if info["summary"]:
        print(textwrap.fill(info["summary"], 100))
    print()
    print("splits:   " + (", ".join(f"{k} ({v})" for k, v in info["splits"].items()) or "none (give --data)"))
    print(f"rounds:   {info['max_turns']} per episode; up to {info['concurrency']} sessions per worker")
    print("tools:")
    for t in info["tools"]:
        fn = t["function"]
        params = fn.get("parameters", {}).get("properties", {})
        args = ", ".join(f"{k}: {v.get('type', '?')}" for k, v in params.items())
        print(f"  {fn['name']}({args})  {fn.get('description', '').splitlines()[0] if fn.get('description') else ''}")
    print("options:  (--option KEY=VALUE, or the environment variable shown)" if info["options"] else "options:  none")
    for o in info["options"]:
        default = "required" if o["required"] else f"default {o['default']!r}"
        print(f"  {o['name']}: {o['type']}, {default}  [{o['env']}]")
        if o["description"]:
            print(textwrap.indent(textwrap.fill(o["description"], 92), "      "))
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from .check import check_task
    from .registry import get_task
    from .stack import LocalStack

    cls = get_task(a.task)
    split = a.split if a.split or a.data else (cls.splits[0] if cls.splits else None)

    def run(url: str):
        return asyncio.run(check_task(url, cls, split=split, data=a.data, concurrency=a.concurrency, progress=not a.json))

    if a.controller:
        report = run(a.controller)
    else:
        options = {a.task: task_options(a.task, a.option)}
        with LocalStack([a.task], split=split, data={a.task: a.data} if a.data else None, task_options=options) as stack:
            report = run(stack.url)
    if a.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for s in report.samples:
            if not s.solved:
                print(f"  sample {s.index}: {s.status}, reward {s.reward}: {s.error}")
        print(f"{report.task}: solved {report.solved}/{report.total} ({report.rate:.1%})", end="")
        if report.without_reference:
            print(f"; {len(report.without_reference)} samples have no reference solution: {report.without_reference}", end="")
        print()
    return 0 if report.rate >= a.min_rate else 1


def cmd_eval(a: argparse.Namespace) -> int:
    from .eval import main as eval_main

    return eval_main(a)


def cmd_eval_report(a: argparse.Namespace) -> int:
    from .eval import eval_report

    eval_report(a.dirs, a.output)
    return 0


def cmd_serve_model(a: argparse.Namespace) -> int:
    from .models.launch import serve_from_args

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise AgentRLEnvsError(f"the model server needs the [local] extra (pip install 'agentrl-envs[local]'): {e}") from None
    serve_from_args(a)
    return 0


def cmd_new(a: argparse.Namespace) -> int:
    from .scaffold import package_dir, scaffold

    files = scaffold(a.name, a.dir, container=a.container)
    root = package_dir(a.name, a.dir)
    print(f"wrote task {a.name!r} in {root}/:")
    for f in files:
        print(f"  {f.relative_to(root)}")
    if a.container:
        print(
            f"next: docker build --network host -t agentrl/worker-{a.name} {root}  &&  agentrl-envs conform --image agentrl/worker-{a.name}"
        )
    else:
        print(f"next: pip install -e {root}  &&  pytest {root}/tests  &&  agentrl-envs check {a.name}")
    return 0


def cmd_openenv(a: argparse.Namespace) -> int:
    from .integrations.openenv import command

    return command(a)


def cmd_conform(a: argparse.Namespace) -> int:
    from .conform.command import main as conform_main

    return conform_main(a)


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentrl-envs", description="Multi-turn tool-calling tasks behind an AgentRL-compatible controller."
    )
    sub = p.add_subparsers(dest="command", required=True)

    def server_args(sp: argparse.ArgumentParser, port: int) -> None:
        sp.add_argument("--host", default="127.0.0.1")
        sp.add_argument("--port", type=int, default=port)
        sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
        sp.add_argument(
            "--worker-secret",
            help="the secret between controller and workers (prefer the environment: AGENTRL_WORKER_SECRET; "
            "a command line is visible to other users of the host)",
        )
        sp.add_argument("--insecure", action="store_true", help="serve beyond loopback without authentication (not recommended)")
        sp.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM; with --ssl-keyfile)")
        sp.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
        sp.add_argument(
            "--ca-file", help="CA bundle (PEM) that verifies the other side's HTTPS certificate (default: the system store)"
        )

    def data_args(sp: argparse.ArgumentParser) -> None:
        g = sp.add_mutually_exclusive_group()
        g.add_argument("--split", help="a split the task ships (see `agentrl-envs list`)")
        g.add_argument("--data", help="a data file or directory in the task's format")
        sp.add_argument("--option", action="append", metavar="KEY=VALUE", help="task option, repeatable")

    sp = sub.add_parser("controller", help="run the controller")
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
    sp.set_defaults(func=cmd_controller)

    sp = sub.add_parser("worker", help="run a worker serving one task")
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
    sp.set_defaults(func=cmd_worker)

    sp = sub.add_parser("up", help="start a controller and one worker per task as local processes")
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
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("build", help="build the base, controller and worker images locally (needs a Docker engine)")
    sp.add_argument("tasks", nargs="*", metavar="TASK", help="tasks to build worker images for (default: all with a Dockerfile)")
    sp.add_argument(
        "--deps", choices=["host", "pypi"], default="host",
        help="dependencies: downloaded by the host's pip (default), or by pip inside the build from PyPI",
    )  # fmt: skip
    sp.add_argument("--rebuild", action="store_true", help="rebuild even if an image with the same inputs exists")
    sp.set_defaults(func=cmd_build)

    sp = sub.add_parser("list", help="list installed tasks, their splits and sizes")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_list)

    sp = sub.add_parser("describe", help="a task's splits, limits, tools and options (--option KEY=VALUE)")
    sp.add_argument("task")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_describe)

    sp = sub.add_parser("check", help="replay every sample's reference solution; exit 1 below --min-rate")
    sp.add_argument("task")
    data_args(sp)
    sp.add_argument("--controller", help="use a running controller instead of starting one")
    sp.add_argument("--min-rate", type=float, default=1.0)
    sp.add_argument("--concurrency", type=int, default=8)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("eval", help="evaluate an OpenAI-compatible model on tasks")
    try:
        from .eval import add_arguments
    except ImportError:  # pragma: no cover - eval is part of the package
        add_arguments = None
    if add_arguments is not None:
        add_arguments(sp)
    sp.set_defaults(func=cmd_eval)

    sp = sub.add_parser("eval-report", help="compare eval runs side by side (tasks as rows; text and HTML)")
    sp.add_argument("dirs", nargs="+", metavar="DIR", help="output directories of eval runs")
    sp.add_argument("--output", help="where comparison.txt, .html and .json go (default: eval_comparison)")
    sp.set_defaults(func=cmd_eval_report)

    sp = sub.add_parser("serve-model", help="serve the built-in model (SmolLM2-135M-Instruct) over an OpenAI-compatible API")
    from .models.launch import add_server_arguments

    add_server_arguments(sp)
    sp.set_defaults(func=cmd_serve_model)

    sp = sub.add_parser("new", help="write a new task package that passes the conformance suite as generated")
    sp.add_argument("name", help="the task's name: a lowercase Python identifier, e.g. my_task")
    sp.add_argument("--dir", help="where to write the package (default: envs/NAME)")
    sp.add_argument("--container", action="store_true", help="a worker in Node.js (standard library) with its Dockerfile instead")
    sp.set_defaults(func=cmd_new)

    sp = sub.add_parser("openenv", help="OpenEnv: serve a task as an OpenEnv environment (docs/openenv.md)")
    from .integrations.openenv import add_arguments as add_openenv_arguments

    add_openenv_arguments(sp, data_args)
    sp.set_defaults(func=cmd_openenv)

    sp = sub.add_parser("conform", help="the conformance suite over the wire: a task behind a controller, or a worker image")
    from .conform.command import add_arguments as add_conform_arguments

    add_conform_arguments(sp)
    sp.set_defaults(func=cmd_conform)
    return p


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # Turn SIGTERM into SystemExit so `with LocalStack(...)` / `with LocalModelServer()` blocks
    # unwind and stop the processes they started (they run in sessions of their own).
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from .stack import exit_with_parent

    exit_with_parent()  # started by a LocalStack: end with it
    logging.basicConfig(
        level=getattr(args, "log_level", "warning").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.func(args)
    except AgentRLEnvsError as e:
        print(f"agentrl-envs: error: {e.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
