"""The bubblewrap sandbox's persistent shell and exec, on a real sandbox; prints latencies."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import pytest

from agentrl_envs.sandbox import SandboxError, SandboxStoppedError
from agentrl_envs.sandbox.bwrap import BubblewrapBackend


async def test_shell_state_persists_between_commands(backend: BubblewrapBackend):
    async with await backend.create() as box:
        r = await box.shell("cd /tmp && export GREETING=hello && sleep 60 & echo started")
        assert r.exit_code == 0 and "started" in r.output
        r = await box.shell("cd /tmp; export GREETING=hello; (sleep 60 &); sleep 61 & true")
        r = await box.shell("pwd; echo $GREETING; jobs | grep -c 'sleep 61'")
        assert r.output.split() == ["/tmp", "hello", "1"]
        assert (await box.shell("false")).exit_code == 1
        assert (await box.shell("printf 'a\\nb'")).output == "a\nb"
        assert (await box.shell("echo err >&2")).output == "err\n"


async def test_exec_is_a_separate_process_with_args_and_stdin(backend: BubblewrapBackend):
    async with await backend.create() as box:
        await box.shell("cd /tmp; export X=1; echo shared > /root/f")
        r = await box.exec('echo "$1|$2|$X"; cat /root/f; cat; whoami', args=["a", "b c"], stdin="in\n")
        assert r.exit_code == 0
        assert r.output == "a|b c|\nshared\nin\nroot\n"
        assert (await box.exec("exit 3")).exit_code == 3


async def test_timeout_interrupts_and_keeps_the_shell(backend: BubblewrapBackend):
    async with await backend.create() as box:
        await box.shell("export KEEP=yes")
        r = await box.shell("while :; do :; done", timeout=1)
        assert r.timed_out
        # The loop ran in the shell itself: that the shell answers shows the loop was stopped.
        assert (await box.shell("echo $KEEP")).output == "yes\n"
        r = await box.shell("trap '' INT; sleep 300", timeout=1)
        assert r.timed_out
        r = await box.shell("echo $KEEP")
        assert r.output == "yes\n" and not r.timed_out
        # A command that ignores SIGINT is killed, not left running.
        assert (await box.shell("ps -eo args | grep -c '^sleep 300'")).output == "0\n"
        r = await box.exec("sleep 30", timeout=0.5)
        assert r.timed_out


async def test_a_shell_its_commands_stopped_raises_stopped_and_a_closed_one_plain(backend: BubblewrapBackend):
    """What ran in the session stopped it (SandboxStoppedError, the OS task scores it as the
    model's failure); a session the task closed is a plain SandboxError."""
    for script, why in (("cd /tmp; exit 3", "the sandbox's shell exited (status 3)"), ("set -e; false", "exited (status 1)")):
        box = await backend.create()
        with pytest.raises(SandboxStoppedError, match=rf"{why.replace('(', '[(]').replace(')', '[)]')}"):
            await box.shell(script)
        with pytest.raises(SandboxStoppedError):  # and every later call
            await box.shell("echo hi")
        await box.close()
    box = await backend.create()
    r = await box.shell("kill -STOP $$", timeout=0.5)  # the shell itself stopped: the interrupt cannot reach it
    assert r.timed_out
    with pytest.raises(SandboxStoppedError, match="did not answer after its command was interrupted"):
        await box.shell("echo hi")
    box = await backend.create()
    await box.close()
    with pytest.raises(SandboxError, match="the sandbox is closed") as e:
        await box.shell("echo hi")
    assert type(e.value) is SandboxError


async def test_latencies(backend: BubblewrapBackend):
    """A session starts in the time of a few process starts (its launcher is a Python process):
    compared with starting a bare Python interpreter, interleaved on the same machine."""
    starts, trips, pythons = [], [], []
    for _ in range(20):
        t = time.perf_counter()
        box = await backend.create()
        starts.append(time.perf_counter() - t)
        for _ in range(5):
            t = time.perf_counter()
            await box.shell("echo hi")
            trips.append(time.perf_counter() - t)
        await box.close()
        t = time.perf_counter()
        await (await asyncio.create_subprocess_exec(sys.executable, "-I", "-c", "pass")).wait()
        pythons.append(time.perf_counter() - t)
    starts.sort()
    ratio = statistics.median(starts) / statistics.median(pythons)
    print(
        f"\nbwrap session start p50={statistics.median(starts) * 1000:.1f}ms max={starts[-1] * 1000:.1f}ms "
        f"({ratio:.1f}x a bare Python start); command round trip p50={statistics.median(trips) * 1000:.2f}ms"
    )
    assert ratio < 10  # 1.7x and 1.9x in two runs on 2 shared cores
