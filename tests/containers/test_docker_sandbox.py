"""The Docker sandbox backend: shell state, timeouts, isolation, limits, warm pool, cleanup."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from docker_helpers import require_docker

from agentrl_envs.sandbox import SandboxError, SandboxLimits, SandboxStoppedError
from agentrl_envs.sandbox.docker import LABEL, PID_LABEL, PIDNS_LABEL, DockerBackend, _pidns

pytestmark = pytest.mark.docker

LIMITS = SandboxLimits(memory_mb=128, cpus=0.5, pids=64, command_timeout_s=20)


@pytest.fixture
async def backend():
    require_docker()
    be = DockerBackend(LIMITS, pool_size=1)
    await be.open()
    yield be
    await be.close()
    assert not be_containers(be), "close() removes every container of the backend"


def be_containers(be: DockerBackend) -> list:
    from agentrl_envs.containers.engine import docker_client

    c = docker_client()
    try:
        return c.api.containers(all=True, filters={"label": f"{LABEL}={be.id}"})  # no per-container inspect: no race
    finally:
        c.close()


async def test_shell_keeps_state_and_exec_is_fresh(backend):
    async with await backend.create() as sb:
        r = await sb.shell("cd /tmp && X=42 && f() { echo f$1; }; sleep 30 & echo out; echo err >&2")
        # As in AgentBench's interactive terminal, starting a background job prints "[1] PID".
        assert r.ok and re.fullmatch(r"\[1\] \d+\nout\nerr\n", r.output), r.output
        r = await sb.shell("pwd; echo $X; f 1; jobs | wc -l; printf 'no newline'")
        assert r.output == "/tmp\n42\nf1\n1\nno newline"
        assert (await sb.shell("exit_code() { return 3; }; exit_code")).exit_code == 3
        r = await sb.exec('echo "$1 $2"; cat; echo ${X:-unset}', args=["a", "b c"], stdin="IN\n")
        assert r.ok and r.output == "a b c\nIN\nunset\n"
        assert (await sb.shell("read line; echo [$line]")).output == "[]\n", "scripts cannot read the shell's protocol"


async def test_timeouts_interrupt_the_command_and_keep_the_shell(backend):
    async with await backend.create() as sb:
        await sb.shell("Y=kept")
        for script in ("while true; do :; done", "sleep 100"):
            r = await sb.shell(script, timeout=1)
            assert r.timed_out and r.exit_code is None
            # The same shell answers next (the loop ran in it), and no sleep is left running.
            assert (await sb.shell("echo $Y")).output == "kept\n"
            assert (await sb.shell("ps -eo args | grep -c '^sleep 100'")).output == "0\n"
        r = await sb.exec("sleep 100", timeout=1)
        assert r.timed_out


async def test_no_network_no_host_files_no_other_sessions(backend):
    a, b = await backend.create(), await backend.create()
    try:
        r = await a.shell(
            "ls /sys/class/net; curl -sS -m 3 http://127.0.0.1:1 >/dev/null 2>&1; python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 3)\""
        )
        assert r.output.split("\n")[0] == "lo" and not r.ok
        host_file = Path(__file__).resolve()
        assert not (await a.shell(f"test -e {host_file}")).ok
        await a.shell("echo secret > /root/a.txt; sleep 60 &")
        assert not Path("/root/a.txt").exists() or Path("/root/a.txt").read_text() != "secret\n"
        r = await b.shell("cat /root/a.txt; ps -e -o cmd | grep -c '^sleep 60'")
        assert "secret" not in r.output and r.output.strip().endswith("0")
    finally:
        await a.close()
        await b.close()


async def test_nothing_of_the_workers_environment_is_visible(monkeypatch):
    """Issue 38, finding 1, for this backend: a session container gets the image's environment,
    never the worker's (checked in its shell and in an exec'd command; every process's)."""
    require_docker()
    secret = f"worker-secret-{time.monotonic_ns()}"
    monkeypatch.setenv("AGENTRL_WORKER_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    be = DockerBackend(LIMITS, pool_size=0)  # the secret is set before any container exists
    await be.open()
    try:
        box = await be.create()
        every = "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; tr '\\0' '\\n' < $p/cmdline; done 2>/dev/null"
        for seen in ((await box.shell(every)).output, (await box.exec(every)).output):
            assert "PATH=" in seen, seen  # the control: environments were read
            assert secret not in seen and "AGENTRL_WORKER_SECRET" not in seen and "OPENAI_API_KEY" not in seen, seen
        await box.close()
    finally:
        await be.close()


async def test_memory_and_pids_limits(backend):
    async with await backend.create() as sb:
        r = await sb.shell("python3 -c \"b = bytearray(400 * 2**20); print('allocated')\"")
        assert r.exit_code not in (0, None) and "allocated" not in r.output
        fork = (
            "python3 - <<'EOF'\nimport os, time\nkids = []\ntry:\n    for _ in range(200):\n        pid = os.fork()\n"
            "        if pid == 0:\n            time.sleep(5)\n            os._exit(0)\n        kids.append(pid)\n"
            "except OSError:\n    print('blocked')\nprint(len(kids))\nfor k in kids:\n    os.kill(k, 9)\nEOF"
        )
        r = await sb.shell(fork)
        blocked, count = r.output.split()
        assert blocked == "blocked" and int(count) < LIMITS.pids
        assert (await sb.shell("echo still here")).output == "still here\n", "the session survives both"


async def test_close_removes_the_container_and_a_dead_shell_raises(backend):
    sb = await backend.create()
    cid = sb.container_id
    await sb.shell("exit 0")
    with pytest.raises(SandboxStoppedError):  # its command stopped it (the OS task: the model's failure)
        await sb.shell("echo hi")
    await sb.close()
    await sb.close()  # idempotent
    with pytest.raises(SandboxError, match="the sandbox is closed") as closed:
        await sb.shell("echo hi")
    assert type(closed.value) is SandboxError
    assert cid not in {c["Id"] for c in be_containers(backend)}


async def test_warm_pool_starts_sessions_fast(backend):
    """A session starts fast because it gets a container the pool started before it was asked for
    (its shell already running), not one started for it."""
    for _ in range(3):
        deadline = time.monotonic() + 30
        while backend._pool.empty():  # wait for the pool to refill
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        started = {c["Id"] for c in be_containers(backend)}  # the pool's, and no session's yet
        sb = await backend.create()
        assert sb.container_id in started
        assert (await sb.shell("echo ok")).ok
        await sb.close()


async def test_open_reaps_containers_of_dead_workers():
    require_docker()
    from agentrl_envs.containers.engine import docker_client

    client = docker_client()
    orphan = client.containers.run(
        "agentrl/base:latest",
        ["sleep", "60"],
        detach=True,
        network_mode="none",
        labels={LABEL: "gone", PID_LABEL: "4194999", PIDNS_LABEL: _pidns()},
    )
    try:
        async with DockerBackend(LIMITS, pool_size=0):
            pass
        assert orphan.id not in {c.id for c in client.containers.list(all=True)}
    finally:
        try:
            orphan.remove(force=True)
        except Exception:
            pass
        client.close()


async def test_no_container_left_after_finished_cancelled_and_abandoned_sessions():
    require_docker()
    be = DockerBackend(LIMITS, pool_size=2)
    await be.open()
    try:

        async def session(i: int) -> None:
            sb = await be.create()
            if i % 3 == 0:  # finished
                await sb.shell("echo done")
                await sb.close()
            elif i % 3 == 1:  # cancelled mid-command (a worker cancelling the session)
                task = asyncio.ensure_future(sb.shell("sleep 30"))
                await asyncio.sleep(0.2)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await sb.close()
            # else: abandoned, never closed; the backend's close removes it

        # 200 sessions, as the issue asks, eight at a time.
        for start in range(0, 200, 8):
            await asyncio.gather(*(session(i) for i in range(start, start + 8)))
    finally:
        await be.close()
    assert not be_containers(be)
