"""Issue 38, "What to build" 2: a worker that dies under a running stack is restarted by its
supervisor, its sessions end ``task error`` naming it (the controller says so), it registers again
and serves new sessions; one that crashes at every start is given up with a clear message.

Real processes: :class:`~agentrl_envs.stack.LocalStack` (what ``agentrl-envs up``, eval and the
trainer run) and ``agentrl-envs up`` itself; workers killed by PID with SIGKILL and SIGSEGV.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

import httpx
import pytest
from fault_stack import wait_until

from agentrl_envs.client import ControllerClient
from agentrl_envs.errors import NoWorkerError, SessionFinishedError
from agentrl_envs.stack import LocalStack
from agentrl_envs.supervisor import RestartPolicy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DB_DEV = resources.files("agentrl_env_db") / "data" / "dev.jsonl"  # the DB task's shipped dev split


def echo(text: str) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": f'{{"text": "{text}"}}'}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def live_worker(url: str, task: str) -> dict | None:
    """The controller's live worker of ``task`` (its id changes when a new run registers), or None."""
    live = [w for w in httpx.get(f"{url}/api/list_workers").json().get(task, []) if w["alive"]]
    return live[0] if live else None


def ended_task_error(client: ControllerClient, sid: int, address: str) -> str:
    """Step session ``sid`` of a dead worker: it ends ``task error`` naming ``address``, either in
    the step's answer or as 409 session_finished (it ended before the step). The reason given."""
    try:
        out = client.interact(sid, [echo("x")])
    except SessionFinishedError as e:
        assert e.data["status"] == "task error", e.message
        why = e.message
    else:
        assert out.finish and out.status.value == "task error", out
        why = str(out.metrics.get("error"))
    assert address in why, why
    return why


def test_a_killed_worker_is_restarted_its_sessions_end_task_error_and_it_serves_again(tmp_path):
    lines: list[str] = []
    with LocalStack(["echo"], log_dir=tmp_path, report=lines.append) as stack, ControllerClient(stack.url) as client:
        first = live_worker(stack.url, "echo")
        address = first["address"]
        idle, stepped = client.start_sample("echo", 0)[0], client.start_sample("echo", 1)[0]
        assert not client.interact(stepped, [echo("nope")]).finish

        worker = stack.processes[1]
        os.kill(worker.proc.pid, signal.SIGKILL)
        wait_until(lambda: (live_worker(stack.url, "echo") or first)["id"] != first["id"], 60, "the worker registers again")
        assert stack.processes[1].proc.pid != worker.proc.pid and stack.processes[1].alive()
        # Its sessions ended when the new run registered: each client learns it, naming the worker.
        for sid in (idle, stepped):
            assert "restarted" in ended_task_error(client, sid, address)
        assert httpx.get(f"{stack.url}/api/list_sessions").json() == []
        # The restarted worker serves new sessions.
        sid, _ = client.start_sample("echo", 2)
        out = client.interact(sid, [echo("stone")])
        assert out.finish and out.status.value == "completed" and out.reward == 1

        # Again, with SIGSEGV, a step sent at once: answered task error (the worker is unreachable,
        # or restarted already), not left to hang.
        second = live_worker(stack.url, "echo")
        sid, _ = client.start_sample("echo", 3)
        os.kill(stack.processes[1].proc.pid, signal.SIGSEGV)
        ended_task_error(client, sid, address)
        wait_until(lambda: (live_worker(stack.url, "echo") or second)["id"] != second["id"], 60, "it registers again")
        sid, _ = client.start_sample("echo", 0)
        assert client.interact(sid, [echo("apple")]).status.value == "completed"
        assert stack.failure() is None and stack.supervisor.restarts("worker-echo") == 2

    said = "\n".join(lines)
    assert "worker-echo exited (signal SIGKILL)" in said and "worker-echo exited (signal SIGSEGV)" in said, said
    assert said.count("restarted (restart") == 2, said
    # The controller says so in its log: the worker is gone, and why.
    log = (tmp_path / "controller.log").read_text()
    assert f"at {address}) is gone: it restarted" in log, log[-3000:]
    assert "restarted by the stack's supervisor" in (tmp_path / "worker-echo.log").read_text()


def test_a_worker_that_crashes_at_every_start_is_given_up(tmp_path):
    data = tmp_path / "db.jsonl"
    data.write_text("".join(DB_DEV.read_text().splitlines(keepends=True)[:3]))
    lines: list[str] = []
    policy = RestartPolicy(max_crashes=3, window_s=120, backoff_s=0.2, max_backoff_s=1.0)
    with LocalStack(["db"], data={"db": str(data)}, log_dir=tmp_path / "logs", restart=policy, report=lines.append) as stack:
        data.unlink()  # from now on every start of the worker fails: its data is gone
        os.kill(stack.processes[1].proc.pid, signal.SIGKILL)
        wait_until(lambda: stack.failure() is not None, 120, "the supervisor gives the worker up")
        failure = stack.failure()
        assert failure.startswith("worker-db exited 3 times within 120 s"), failure
        assert "given up" in failure and "does not exist" in failure, failure  # the last run's error, from its log
        assert stack.supervisor.restarts("worker-db") == 2 and not stack.processes[1].alive()
        # What clients see: no worker serves the task (the dead one is dropped at the first try).
        with ControllerClient(stack.url) as client, pytest.raises(NoWorkerError, match="no live worker serves task 'db'"):
            client.start_sample("db", 0)
        assert live_worker(stack.url, "db") is None
    assert sum("worker-db exited" in line for line in lines) == 3, lines


def test_up_restarts_a_killed_worker_and_stops_once_one_is_given_up(tmp_path):
    """``agentrl-envs up``: a killed worker comes back (``up`` keeps serving); once a worker cannot
    start again (its port taken), ``up`` says it gave it up and exits 1."""
    from agentrl_envs.stack import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl_envs.cli", "up", "--tasks", "echo", "--port", str(port), "--log-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's: past TIME_WAIT, not a listener
    try:
        url = f"http://127.0.0.1:{port}"
        # Until up says it is ready, a worker that exits fails the start-up (up exits 2): the worker
        # registers before up has finished checking it, so wait for the line, not for the registry.
        head = []
        while not head or not head[-1].startswith("press Ctrl-C"):
            line = proc.stdout.readline()  # the test's timeout guards a hang
            assert line, f"up exited during start-up: {''.join(head)}"
            head.append(line)
        assert live_worker(url, "echo") is not None
        first = live_worker(url, "echo")
        worker_port = int(first["address"].rsplit(":", 1)[1].split("/")[0])
        pid = worker_pid(proc.pid, worker_port)

        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: (live_worker(url, "echo") or first)["id"] != first["id"], 60, "the worker registers again")
        assert proc.poll() is None, "up kept running"
        r = httpx.post(f"{url}/api/start_sample", json={"name": "echo", "index": 0})
        assert r.status_code == 200

        # Its port taken as soon as it dies (the first restart waits >= 0.5 s): no start succeeds.
        pid = worker_pid(proc.pid, worker_port)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: _bind(blocker, worker_port), 5, "the dead worker's port is free")
        assert proc.wait(180) == 1
        out = "".join(head) + proc.stdout.read()
    finally:
        blocker.close()
        if proc.poll() is None:
            proc.kill()
    assert "supervisor: worker-echo exited (signal SIGKILL)" in out, out
    assert "stopping: worker-echo exited 5 times within 60 s" in out and "given up" in out, out
    assert "address already in use" in out.lower(), out  # the reason, from the worker's log


def _bind(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    sock.listen()
    return True


def worker_pid(up_pid: int, port: int) -> int:
    """The pid of the child of ``up`` listening on ``port`` (its command line names the port)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        if ppid == up_pid and b"worker" in args and str(port).encode() in args:
            return int(entry.name)
    raise AssertionError(f"no worker on port {port} among the children of up ({up_pid})")
