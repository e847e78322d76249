"""Nothing left behind by a killed OS worker (bubblewrap): no process, no session dir, no cgroup,
once the next worker has started or a running worker's timer has fired; a live worker's sessions
are never touched. Workers here are real ``agentrl-envs worker os`` processes, killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from os_helpers import require_sandbox, sandbox_processes

from agentrl_envs.sandbox.base import SandboxLimits
from agentrl_envs.sandbox.bwrap_host import reap_stale_sessions
from agentrl_envs.sandbox.cgroups import SessionCgroup, cgroup_parents
from agentrl_envs.stack import ManagedProcess, listening_socket, worker_args


def wait_until(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


class Worker:
    """One ``agentrl-envs worker os --option backend=bwrap`` process, sessions in ``base_dir``."""

    def __init__(self, rootfs: Path, base_dir: Path, log_dir: Path, reap_interval_s: float) -> None:
        listen = listening_socket()  # the worker inherits it (--fd): no port changes hands
        self.port = listen.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        options = {"backend": "bwrap", "rootfs": rootfs, "reap_interval_s": reap_interval_s}
        argv = [sys.executable, "-m", "agentrl_envs.cli", "worker", "os", "--port", str(self.port), "--log-level", "warning"]
        env = {**os.environ, "AGENTRL_SANDBOX_DIR": str(base_dir)}
        self.process = ManagedProcess(
            f"worker-os-{self.port}", argv + worker_args(options=options), log_dir / f"{self.port}.log", env, listen=listen
        )
        self.pid = self.process.proc.pid
        self.http = httpx.Client(timeout=60)

        def up() -> bool:
            assert self.process.alive(), self.process.log_tail()
            try:
                return self.http.get(f"{self.url}/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=60)  # it serves once its start-up sweep is done

    def open_session(self, session_id: int) -> None:
        r = self.http.post(f"{self.url}/api/start_sample", json={"index": 0, "session_id": session_id})
        assert r.status_code == 200, r.text
        assert "started" in self.bash(session_id, "sleep 300 & echo started")

    def bash(self, session_id: int, script: str) -> str:
        call = {"id": "c", "type": "function", "function": {"name": "bash_action", "arguments": json.dumps({"script": script})}}
        body = {"session_id": session_id, "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
        r = self.http.post(f"{self.url}/api/interact", json=body)
        assert r.status_code == 200, r.text
        return r.json()["env_out"]["messages"][0]["content"]

    def leftovers(self, base_dir: Path) -> tuple[list[int], list[str], list[str]]:
        """This worker's sandbox processes, session dirs and session cgroups."""
        prefix = f"{self.pid}-"
        dirs = [d.name for d in base_dir.iterdir() if d.name.startswith(prefix)]
        groups = [g.name for parent in cgroup_parents() for g in parent.glob(f"{prefix}*")]
        return sandbox_processes(prefix), dirs, groups

    def kill(self) -> None:
        self.process.proc.send_signal(signal.SIGKILL)
        self.process.proc.wait()

    def stop(self) -> None:
        self.http.close()
        self.process.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    rootfs = require_sandbox()
    base_dir = tmp_path / "boxes"
    started: list[Worker] = []

    def start(reap_interval_s: float = 3600) -> Worker:
        w = Worker(rootfs, base_dir, tmp_path, reap_interval_s)
        started.append(w)
        return w

    start.base_dir = base_dir  # type: ignore[attr-defined]
    yield start
    for w in started:
        w.stop()


def test_next_worker_removes_what_a_killed_worker_left_and_spares_a_live_one(workers: Any) -> None:
    base_dir = workers.base_dir
    killed, live = workers(), workers()
    killed.open_session(1)
    killed.open_session(2)
    live.open_session(3)
    processes, dirs, groups = killed.leftovers(base_dir)
    assert processes and len(dirs) == 2 and len(groups) == 2 * len(cgroup_parents())

    killed.kill()
    # --die-with-parent and the end of each sandbox's pid namespace take its processes down;
    # the dirs and cgroups stay until a sweep.
    wait_until(lambda: not killed.leftovers(base_dir)[0], timeout=10)
    assert killed.leftovers(base_dir)[1:] == (dirs, groups)

    workers()  # sweeps at start, before it serves
    assert killed.leftovers(base_dir) == ([], [], [])
    live_processes, live_dirs, live_groups = live.leftovers(base_dir)
    assert live_processes and len(live_dirs) == 1 and len(live_groups) == len(cgroup_parents())
    assert "hello" in live.bash(3, "echo hello; jobs")


def test_running_worker_removes_what_a_killed_worker_left_on_its_timer(workers: Any) -> None:
    base_dir = workers.base_dir
    killed, live = workers(), workers(reap_interval_s=0.5)
    killed.open_session(1)
    live.open_session(2)
    assert all(killed.leftovers(base_dir))
    killed.kill()
    wait_until(lambda: killed.leftovers(base_dir) == ([], [], []))
    assert all(live.leftovers(base_dir))
    assert "hello" in live.bash(2, "echo hello")


def test_sweep_kills_what_runs_in_a_dead_workers_cgroup_and_removes_it(tmp_path: Path) -> None:
    """A cgroup of a dead worker outside any session dir (another ``base_dir``), with a process
    still in it, its owner's pid since given to another process: the sweep kills the process and
    removes the cgroup."""
    require_sandbox()
    parents = cgroup_parents()
    if not parents:
        pytest.fail("no writable cgroup hierarchy: the sandbox cannot limit sessions here")
    # Its owner's pid is in use, by this process, which started later than the owner did: a
    # reused pid, the case a pid alone would get wrong.
    name = f"{os.getpid()}-1-abcdef012345"
    group = SessionCgroup.create(parents, name, SandboxLimits())
    stray = subprocess.Popen(["sleep", "300"])
    try:
        for f in group.procs_files:
            f.write_text(str(stray.pid))
        (tmp_path / "boxes").mkdir()
        assert name in reap_stale_sessions(tmp_path / "boxes", parents)
        assert stray.wait(5) == -signal.SIGKILL
        assert not any((p / name).exists() for p in parents)
    finally:
        stray.kill()
        stray.wait()
        group.kill_and_remove()
