"""The commands about tasks: ``list``, ``describe``, ``check`` (replay the references) and ``new``
(write a task package)."""

from __future__ import annotations

import argparse
import asyncio
import json
import textwrap

from ..task_info import describe_task, split_sizes, task_options
from .arguments import data_args


def list_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--json", action="store_true")


def cmd_list(a: argparse.Namespace) -> int:
    from ..registry import get_task, task_names

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


def describe_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("task")
    sp.add_argument("--json", action="store_true")


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


def check_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("task")
    data_args(sp)
    sp.add_argument("--controller", help="use a running controller instead of starting one")
    sp.add_argument("--min-rate", type=float, default=1.0)
    sp.add_argument("--concurrency", type=int, default=8)
    sp.add_argument("--json", action="store_true")


def cmd_check(a: argparse.Namespace) -> int:
    from ..check import check_task
    from ..registry import get_task
    from ..stack import LocalStack

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


def new_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("name", help="the task's name: a lowercase Python identifier, e.g. my_task")
    sp.add_argument("--dir", help="where to write the package (default: envs/NAME)")
    sp.add_argument("--container", action="store_true", help="a worker in Node.js (standard library) with its Dockerfile instead")


def cmd_new(a: argparse.Namespace) -> int:
    from ..scaffold import package_dir, scaffold

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
