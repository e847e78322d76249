"""LocalStack: processes and temporary logs are gone after a clean exit; logs stay after an error;
its processes end when the process that started them is killed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest

from agentrl_envs.stack import PARENT_ENV, LocalStack, exit_with_parent


def test_clean_exit_removes_processes_and_its_temporary_logs():
    with LocalStack(["echo"]) as stack:
        procs = [p.proc for p in stack.processes]
        assert httpx.get(f"{stack.url}/health").json()["live_workers"] == {"echo": 1}
        log_dir = stack.log_dir
        assert (log_dir / "controller.log").exists()
    assert all(p.poll() is not None for p in procs)
    assert not log_dir.exists()


def test_an_error_inside_keeps_the_logs_and_a_named_dir_is_kept(tmp_path):
    with pytest.raises(RuntimeError):
        with LocalStack(["echo"]) as stack:
            log_dir = stack.log_dir
            raise RuntimeError("boom")
    assert (log_dir / "worker-echo.log").exists()
    shutil.rmtree(log_dir)
    with LocalStack(["echo"], log_dir=tmp_path / "logs"):
        pass
    assert (tmp_path / "logs" / "controller.log").exists()


def test_a_port_taken_between_choosing_and_binding_it_cannot_stop_the_stack(monkeypatch):
    """Every server of the stack inherits a socket bound before it starts (``--fd``). Before, each
    bound a port chosen by ``free_port`` and a sweep run was lost when another socket took it in
    between: here ``free_port`` hands out a port that is taken, as that race would. This process
    keeps no copy of the sockets: a worker that died refuses connections (it does not hang)."""
    import socket

    import agentrl_envs.stack as stack_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setattr(stack_module, "free_port", lambda host="127.0.0.1": taken.getsockname()[1])
    try:
        with LocalStack(["echo"], restart=None) as stack:
            worker = stack.processes[1]
            worker_port = int(worker.argv[worker.argv.index("--port") + 1])
            assert taken.getsockname()[1] not in (stack.port, worker_port)
            assert httpx.get(f"{stack.url}/health").json()["live_workers"] == {"echo": 1}
            assert httpx.get(f"http://127.0.0.1:{worker_port}/health").status_code == 200
            worker.proc.kill()
            worker.proc.wait()
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{worker_port}/health", timeout=5)
    finally:
        taken.close()


def test_a_server_thread_holds_its_port_from_construction(monkeypatch):
    """The in-process server (tests, conformance) binds its socket when it is built, not when its
    thread starts: a port from ``free_port`` that something took in between cannot stop it; and
    once stopped, its port refuses connections."""
    import socket

    import agentrl_envs.stack as stack_module
    from agentrl_envs.controller import ControllerService, create_controller_app

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setattr(stack_module, "free_port", lambda host="127.0.0.1": taken.getsockname()[1])
    try:
        server = stack_module.ServerThread(create_controller_app(ControllerService()))
        assert server.port != taken.getsockname()[1]
        with pytest.raises(OSError):  # the port is the server's before its thread has started
            socket.create_server(("127.0.0.1", server.port))
        server.start()
        assert httpx.get(f"{server.url}/health").status_code == 200
        server.stop()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=5)
    finally:
        taken.close()


HOLDER = """
import sys, time
from agentrl_envs.stack import LocalStack
stack = LocalStack(["echo"]).__enter__()
print(" ".join(str(p.proc.pid) for p in stack.processes), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped by init) counts as gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.timeout(120)
def test_a_stack_whose_process_is_killed_does_not_leave_its_processes_behind():
    """SIGKILL (or the OOM killer) gives LocalStack no chance to stop its controller and workers,
    which run in sessions of their own: they notice their parent is gone and stop themselves."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(p) for p in holder.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)  # the controller and the echo worker
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), "processes outlived their stack"
    finally:
        holder.kill()
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def test_only_a_process_whose_parent_is_named_watches_it(monkeypatch):
    monkeypatch.setenv(PARENT_ENV, str(os.getpid()))  # this process is not its own parent
    assert exit_with_parent() is False and PARENT_ENV not in os.environ  # and it does not pass it on
    monkeypatch.setenv(PARENT_ENV, "not-a-pid")
    assert exit_with_parent() is False
