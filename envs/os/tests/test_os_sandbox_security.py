"""What a session must not be able to do, on real sandboxes: reach the network or the host's
files, see another session or anything of the worker's environment, make namespaces of its own
past the seccomp filter, or take the worker down with a fork bomb, a memory hog or a loop.

(``tests/containers/test_os_worker_userns.py`` runs this file inside the socket-free OS worker
image too, so each check holds in both launch modes.)"""

from __future__ import annotations

import asyncio
import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from os_helpers import require_sandbox, sandbox_processes

from agentrl_envs.sandbox import SandboxError, SandboxLimits
from agentrl_envs.sandbox.bwrap import BubblewrapBackend


async def test_no_network_but_loopback(backend: BubblewrapBackend):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        async with await backend.create() as box:
            r = await box.shell(f"curl -sS -m 3 http://127.0.0.1:{port}/ >/dev/null; echo rc=$?")
            assert "rc=7" in r.output  # connection refused: the host's loopback is not the sandbox's
            r = await box.shell("ip -o link | awk '{print $2}'; ip route | wc -l")
            assert r.output.split() == ["lo:", "0"]  # no interface but lo, no route out
            # With no route, a connect to any outside address fails inside the namespace: no packet leaves.
            r = await box.shell("python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 80), timeout=3)' 2>&1")
            assert "Network is unreachable" in r.output
            r = await box.shell(
                "python3 -m http.server 8000 >/dev/null 2>&1 & sleep 1; curl -s -o /dev/null -w '%{http_code}' localhost:8000"
            )
            assert r.output.strip().endswith("200")  # the sandbox's own loopback works
    finally:
        server.shutdown()


async def test_host_files_are_out_of_reach(backend: BubblewrapBackend):
    # The worker's /tmp and its home (root's, or the socket-free container's uid's).
    markers = [Path("/tmp") / f"agentrl-host-marker-{os.getpid()}", Path.home() / f".agentrl-host-marker-{os.getpid()}"]
    for m in markers:
        m.write_text("secret")
    try:
        async with await backend.create() as box:
            for m in markers:
                r = await box.shell(f"cat {m}; echo pwned > {m}; echo rc=$?")
                assert "secret" not in r.output
            await box.shell("echo inside > /tmp/agentrl-inside-file; rm -rf /usr/bin/ls")
            assert (await box.shell("mount | grep -c ' / '")).exit_code == 0
        for m in markers:
            assert m.read_text() == "secret"
        assert not Path("/tmp/agentrl-inside-file").exists()
        async with await backend.create() as box:  # the base rootfs was not changed
            assert (await box.shell("ls / >/dev/null && echo ok")).output == "ok\n"
    finally:
        for m in markers:
            m.unlink(missing_ok=True)


#: Every environment and command line of the session's processes, one variable or argument a line.
EVERY_ENVIRON = "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; tr '\\0' '\\n' < $p/cmdline; done 2>/dev/null"


async def test_nothing_of_the_workers_environment_is_visible(backend: BubblewrapBackend, monkeypatch):
    """Issue 38, finding 1: bubblewrap's init (pid 1 of the session) kept the worker's environment."""
    secret = f"worker-secret-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("AGENTRL_WORKER_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    async with await backend.create() as box:
        for seen in ((await box.shell(EVERY_ENVIRON)).output, (await box.exec(EVERY_ENVIRON)).output):
            assert "AGENTRL_SANDBOX=" in seen and "PATH=" in seen, seen  # the control: environments were read
            assert secret not in seen and "AGENTRL_WORKER_SECRET" not in seen and "OPENAI_API_KEY" not in seen, seen
            paths = {line for line in seen.splitlines() if line.startswith("PATH=")}
            assert paths == {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, paths  # not the worker's


#: A clone(2) with CLONE_NEWUSER (0x10000000) | SIGCHLD from Python, as a C program would call it.
CLONE_NEWUSER = "import ctypes, os; r = ctypes.CDLL(None, use_errno=True).syscall(56, 0x10000000 | 17, 0, 0, 0, 0); print('clone', r, os.strerror(ctypes.get_errno()))"


async def test_every_session_process_runs_under_the_seccomp_filter(backend: BubblewrapBackend):
    """Issue 38, item 7: sessions started by a worker on a host ran with no filter (``Seccomp: 0``)."""
    probe = (
        "grep '^Seccomp:' /proc/self/status; unshare -U true 2>&1; echo unshare=$?; "
        f'python3 -c "{CLONE_NEWUSER}"; '
        "python3 -c 'import ctypes, os; print(\"keyctl\", ctypes.CDLL(None, use_errno=True).syscall(250, 0, 0, 0, 0, 0), os.strerror(ctypes.get_errno()))'"
    )
    async with await backend.create() as box:
        for seen in ((await box.shell(probe)).output, (await box.exec(probe)).output):
            assert "Seccomp:\t2" in seen, seen
            assert "unshare=1" in seen and "Operation not permitted" in seen, seen
            assert "clone -1 Operation not permitted" in seen, seen  # no user namespace by clone either
            assert "keyctl -1 Operation not permitted" in seen, seen  # a call the profile refuses
            assert (
                await box.shell(
                    "python3 -c 'import threading; t = threading.Thread(target=print, args=(1,)); t.start(); t.join()'"
                )
            ).output == "1\n"


async def test_sessions_do_not_see_each_other(backend: BubblewrapBackend):
    async with await backend.create() as a, await backend.create() as b:
        await a.shell("echo mine > /root/a-file; sleep 300 & echo")
        r = await b.shell("ls /root; ps -eo comm")
        assert "a-file" not in r.output and "sleep" not in r.output
        assert (await b.shell("hostname")).output == "sandbox\n"
        r = await b.shell("kill -9 -1 2>&1; echo done")
        assert (await a.shell("jobs | wc -l")).output.strip() == "1"


async def test_fork_bomb_memory_hog_and_loop_do_not_stop_the_worker(backend: BubblewrapBackend):
    async with await backend.create() as box:
        r = await box.shell("python3 -c 'b = bytearray(1024**3); print(len(b))'; echo rc=$?")
        if backend.cgroup_parents:
            assert "rc=137" in r.output  # killed by the session's memory limit (256 MiB here)
        else:  # no writable cgroups (a container): refused by RLIMIT_DATA, 256 MiB per process
            assert "MemoryError" in r.output and "rc=1" in r.output, r.output
        assert (await box.shell("echo alive")).output == "alive\n"
    # A fork bomb: its processes, counted from the host while it runs, stay within the session's
    # process limit (64 here), and none is left once the session is closed.
    box = await backend.create()
    limit = backend.limits.pids
    bomb = asyncio.ensure_future(box.shell("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=5))
    counts = []
    while not bomb.done():
        counts.append(len(await asyncio.to_thread(sandbox_processes, box.id)))
        await asyncio.sleep(0.05)
    try:
        await bomb  # timed out, or the shell survived: either way the session held
    except SandboxError:
        pass  # the session ended: also held
    assert limit // 2 < max(counts) <= limit, counts  # it did multiply, up to the limit and no further
    await box.close()
    assert sandbox_processes(box.id) == []
    box = await backend.create()
    r = await box.shell("while :; do :; done", timeout=1)
    assert r.timed_out
    await box.close()
    async with await backend.create() as box:  # the worker still serves sessions
        assert (await box.shell("echo next")).output == "next\n"


async def test_no_leftovers_after_200_sessions(backend: BubblewrapBackend):
    prefix = f"{os.getpid()}-"

    async def one(i: int) -> None:
        box = await backend.create()
        kind = i % 3
        if kind == 0:  # finished
            await box.shell("sleep 100 & echo hi")
            await box.close()
        elif kind == 1:  # cancelled mid-command
            task = asyncio.ensure_future(box.shell("sleep 100"))
            await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await box.close()
        else:  # closed (killed) mid-command
            task = asyncio.ensure_future(box.shell("sleep 100"))
            await asyncio.sleep(0.05)
            await box.close()
            await asyncio.gather(task, return_exceptions=True)

    for batch in range(10):
        await asyncio.gather(*(one(batch * 20 + i) for i in range(20)))
    assert sandbox_processes(prefix) == []
    assert list(backend.base_dir.iterdir()) == []
    assert [p for parent in backend.cgroup_parents for p in parent.glob(f"{prefix}*")] == []


def test_worker_killed_leaves_nothing_behind(tmp_path: Path):
    rootfs = require_sandbox()
    base = tmp_path / "boxes"
    code = f"""
import asyncio, os
from agentrl_envs.sandbox.bwrap import BubblewrapBackend
async def main():
    b = BubblewrapBackend({str(rootfs)!r}, base_dir={str(base)!r})
    await b.open()
    box = await b.create()
    await box.shell("sleep 300 & echo")
    print("ready", flush=True)
    await asyncio.sleep(300)
asyncio.run(main())
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert sandbox_processes(f"{proc.pid}-")
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while sandbox_processes(f"{proc.pid}-") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(f"{proc.pid}-") == []
    assert len(list(base.iterdir())) == 1  # its dir stays until the next backend opens

    async def reopen() -> None:
        async with BubblewrapBackend(rootfs, limits=SandboxLimits(), base_dir=base):
            pass

    asyncio.run(reopen())
    assert list(base.iterdir()) == []
