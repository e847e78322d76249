"""The in-process ``reference_replay`` check: every reference of a split replayed through a real
controller and worker over HTTP must score 1."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx

from ..episode import TaskRuntime
from ..errors import InfrastructureError
from ..task import Task
from .common import installed, split_of, task_label


@contextlib.contextmanager
def _threaded_stack(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> Iterator[str]:
    """A controller and a worker of ``task_cls`` (any class, installed or not) over loopback HTTP, in threads."""
    from ..controller import ControllerService, create_controller_app
    from ..stack import ServerThread, listening_socket, tasks_without_live_worker
    from ..worker import WorkerService, create_worker_app

    controller = ServerThread(create_controller_app(ControllerService())).start()
    worker: ServerThread | None = None
    try:
        listen = listening_socket()
        port = listen.getsockname()[1]
        runtime = TaskRuntime(task_cls, split=split, config=config)
        service = WorkerService(runtime, controller_url=controller.url, self_address=f"http://127.0.0.1:{port}/api")
        worker = ServerThread(create_worker_app(service), listen=listen).start()
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2.0) as http:
            while tasks_without_live_worker(http, controller.url, [task_cls.name]):
                if time.monotonic() > deadline:
                    raise InfrastructureError(f"the worker of {task_cls.name!r} did not register with the controller")
                time.sleep(0.05)
        yield controller.url
    finally:
        if worker is not None:
            worker.stop()
        controller.stop()


def _sessions_left(url: str, task: str) -> dict[str, Any]:
    """Sessions of ``task`` the controller and its workers still hold."""
    with httpx.Client(timeout=5.0) as http:
        left: dict[str, Any] = {}
        on_controller = [s for s in http.get(f"{url}/api/list_sessions").json() if s.get("name") == task]
        if on_controller:
            left["controller"] = on_controller
        for w in http.get(f"{url}/api/list_workers").json().get(task, []):
            if w.get("alive"):
                held = http.get(f"{w['address'].rstrip('/')}/get_sessions").json()
                if held:
                    left[w["address"]] = held
        return left


def check_reference_replay(
    task_cls: type[Task],
    split: str | None = None,
    *,
    config: dict[str, Any] | None = None,
    controller_url: str | None = None,
    require_all_references: bool = False,
    concurrency: int = 8,
) -> list[str]:
    """Replay every reference of the split through a controller and a worker: all must score 1.

    ``controller_url``: a running controller already serving this task (same split and options);
    else one is started (see the module docstring)."""
    from ..check import check_task
    from ..stack import LocalStack

    split = split_of(task_cls, split)
    who = task_label(task_cls, split)
    assert getattr(task_cls.reference_policy, "__func__", None) is not getattr(Task.reference_policy, "__func__", None), (
        f"{who}: expected a reference_policy (how to solve a sample; `agentrl-envs check` replays it), got Task's default"
    )

    def replay(url: str) -> Any:
        report = asyncio.run(check_task(url, task_cls, split=split, concurrency=concurrency, progress=False))
        deadline = time.monotonic() + 10
        while (left := _sessions_left(url, task_cls.name)) and time.monotonic() < deadline:
            time.sleep(0.2)  # a cancel may still be on its way
        assert not left, f"{who}: expected no session left after the replay, got {left}"
        return report

    if controller_url is not None:
        report = replay(controller_url)
    elif installed(task_cls):
        options = {task_cls.name: {k: v for k, v in (config or {}).items() if v is not None}}
        with LocalStack([task_cls.name], split=split, task_options=options) as stack:
            report = replay(stack.url)
    else:
        with _threaded_stack(task_cls, split, config) as url:
            report = replay(url)

    notes = []
    total = report.total + len(report.without_reference)
    if report.without_reference:
        missing = f"{len(report.without_reference)} of {total} samples have no reference: {report.without_reference}"
        assert not require_all_references, f"{who}: expected a reference for every sample, got {missing}"
        notes.append(f"{missing} (reference_policy returned None; not replayed)")
    assert report.total > 0, f"{who}: expected at least one sample with a reference, got none of {total}"
    failed = [s for s in report.samples if not s.solved]
    if failed:
        lines = [
            f"sample {s.index}: status {s.status!r}, reward {s.reward}, {s.turns} turns: {str(s.error)[:300]}"
            for s in failed[:10]
        ]
        more = f"; and {len(failed) - 10} more" if len(failed) > 10 else ""
        raise AssertionError(
            f"{who}: expected every reference replay to end 'completed' with reward 1, got {len(failed)} of {report.total}"
            " not solved:\n  " + "\n  ".join(lines) + more
        )
    return notes
