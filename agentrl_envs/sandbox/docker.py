"""The Docker sandbox backend: one container per session, a warm pool of ready ones.

Each sandbox is a container of ``image`` (default ``agentrl/base:latest``, imported by
``agentrl-envs build`` or by :meth:`DockerBackend.open` from the root filesystem) running
``sleep infinity`` as PID 1 with ``--network none``, a memory cap (swap included), a CPU share, a
pids limit and ``no-new-privileges``; nothing from the host is mounted. Its persistent shell is
an interactive ``bash`` reached through ``docker exec -i`` (interactive so that SIGINT ends the
running command, a pure-bash loop included, and leaves the shell alive; as in AgentBench's
terminal, starting a background job prints ``[1] PID``). A script is sent as
base64 and ``eval``'d with stdin from ``/dev/null`` (it cannot read the protocol), followed by a
unique marker carrying ``$?``.

The warm pool keeps ``pool_size`` containers started, each with its shell open, so
:meth:`DockerBackend.create` takes one at once and refills in the background; an empty pool
falls back to a cold start. Every container carries ``agentrl.sandbox=<backend id>`` and
``agentrl.sandbox.pid=<worker pid>``: :meth:`~DockerBackend.close` removes the backend's
containers, an ``atexit`` hook does the same if the worker exits without closing, and
:meth:`~DockerBackend.open` removes containers left by a dead worker process on this host.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import os
import secrets
import time
from collections.abc import Sequence
from typing import Any

from .base import CommandResult, Sandbox, SandboxBackend, SandboxError, SandboxLimits

LABEL = "agentrl.sandbox"
PID_LABEL = "agentrl.sandbox.pid"
_SHELL = ["bash", "--noprofile", "--norc", "--noediting", "-i"]
_SETUP = "PS1=; PS2=; PS0=; PROMPT_COMMAND=; set +H +m; exec 2>&1; echo __agentrl_pid=$$\n"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DockerSandbox(Sandbox):
    """One session's container and its shell; made by :class:`DockerBackend`."""

    def __init__(self, backend: DockerBackend, container_id: str, proc: asyncio.subprocess.Process, shell_pid: int) -> None:
        self._backend = backend
        self.container_id = container_id
        self._proc = proc
        self._shell_pid = shell_pid
        self._closed = False
        self._dead = False

    async def _docker(self, *args: str, timeout: float = 10.0) -> tuple[int | None, bytes]:
        proc = await asyncio.create_subprocess_exec(
            "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return None, b""
        return proc.returncode, out

    async def _read_until(self, marker: bytes, deadline: float) -> tuple[bytes, bytes | None]:
        """Read the shell's stdout until ``marker`` + the rest of its line; ``(before, line)`` or ``(buf, None)`` on timeout/EOF."""
        assert self._proc.stdout is not None
        buf = bytearray()
        while True:
            i = buf.find(marker)
            if i >= 0:
                j = buf.find(b"\n", i)
                if j >= 0:
                    return bytes(buf[:i]), bytes(buf[i + len(marker) : j])
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buf), None
            try:
                chunk = await asyncio.wait_for(self._proc.stdout.read(65536), left)
            except asyncio.TimeoutError:
                return bytes(buf), None
            if not chunk:
                self._dead = True
                return bytes(buf), None
            buf += chunk

    async def shell(self, script: str, timeout: float | None = None) -> CommandResult:
        if self._closed or self._dead or self._proc.returncode is not None:
            raise SandboxError("the session's shell is gone (closed, exited or killed)")
        assert self._proc.stdin is not None
        timeout = self._backend.limits.command_timeout_s if timeout is None else timeout
        marker = f"__agentrl_done_{secrets.token_hex(8)}__".encode()
        b64 = base64.b64encode(script.encode()).decode()
        line = f"eval \"$(printf %s '{b64}' | base64 -d)\" </dev/null; printf '%s%d\\n' '{marker.decode()}' $?\n"
        try:
            self._proc.stdin.write(line.encode())
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            self._dead = True
            raise SandboxError(f"the session's shell is gone: {e}") from None
        out, tail = await self._read_until(marker, time.monotonic() + timeout)
        if tail is not None:
            return CommandResult(int(tail), out.decode(errors="replace"))
        if self._dead:
            return CommandResult(None, out.decode(errors="replace"))
        return await self._interrupt(out)

    async def _interrupt(self, out: bytes) -> CommandResult:
        """SIGINT the shell's process group, SIGKILL its children if that is not enough, resync."""
        await self._docker("exec", self.container_id, "kill", "-INT", "--", f"-{self._shell_pid}")
        marker = f"__agentrl_sync_{secrets.token_hex(8)}__".encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            assert self._proc.stdin is not None
            self._proc.stdin.write(b"\nprintf '%s%d\\n' '" + marker + b"' 0\n")
            await self._proc.stdin.drain()
        more, tail = await self._read_until(marker, time.monotonic() + 2.0)
        if tail is None and not self._dead:
            await self._docker("exec", self.container_id, "pkill", "-KILL", "-P", str(self._shell_pid))
            more2, tail = await self._read_until(marker, time.monotonic() + 2.0)
            more += more2
            if tail is None:
                self._dead = True  # the shell itself is stuck: the next call raises
        return CommandResult(None, (out + more).decode(errors="replace"), timed_out=True)

    async def exec(
        self, script: str, timeout: float | None = None, *, stdin: str | None = None, args: Sequence[str] = ()
    ) -> CommandResult:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        timeout = self._backend.limits.command_timeout_s if timeout is None else timeout
        # coreutils `timeout` inside the container kills the command itself, not just our client.
        proc = await asyncio.create_subprocess_exec(
            "docker", "exec", "-i", self.container_id, "timeout", "-k", "1", f"{timeout}", "bash", "-c", script, "bash", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate((stdin or "").encode()), timeout + 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return CommandResult(None, "", timed_out=True)
        if proc.returncode in (124, 137) and out.startswith(b"Error response from daemon"):
            raise SandboxError(f"the sandbox is gone: {out.decode(errors='replace').strip()}")
        timed_out = proc.returncode in (124, 137)
        return CommandResult(None if timed_out else proc.returncode, out.decode(errors="replace"), timed_out=timed_out)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        with contextlib.suppress(Exception):
            await self._proc.wait()
        await self._backend._remove(self.container_id)


class DockerBackend(SandboxBackend):
    """Containers from ``image``; ``pool_size`` of them kept warm (0 disables the pool)."""

    def __init__(
        self, limits: SandboxLimits | None = None, *, image: str = "agentrl/base:latest", pool_size: int = 2, build: bool = True
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.image = image
        self.pool_size = pool_size
        self.build = build
        self.id = secrets.token_hex(6)
        self._client: Any = None
        self._pool: asyncio.Queue[DockerSandbox] = asyncio.Queue()
        self._refill: set[asyncio.Task[None]] = set()
        self._live: dict[str, DockerSandbox] = {}
        self._closed = False

    async def open(self) -> None:
        self._client = await asyncio.to_thread(self._connect)
        atexit.register(self._remove_all_sync)
        for _ in range(self.pool_size):
            self._spawn_refill()

    def _connect(self) -> Any:
        from ..containers.engine import DockerUnavailable, docker_client, image_exists

        try:
            client = docker_client()
        except DockerUnavailable as e:
            raise SandboxError(e.message) from None
        if not image_exists(client, self.image):
            if not (self.build and self.image.startswith("agentrl/base:")):
                raise SandboxError(f"image {self.image} is missing: run `agentrl-envs build`")
            from ..containers.build import ensure_base

            try:
                ensure_base(client, log=lambda _: None)
            except Exception as e:
                raise SandboxError(f"could not build {self.image}: {e}") from e
        self._reap_orphans(client)
        return client

    def _reap_orphans(self, client: Any) -> None:
        """Remove sandbox containers whose worker process (on this host) is gone."""
        for c in client.containers.list(all=True, filters={"label": LABEL}):
            pid = c.labels.get(PID_LABEL, "")
            if pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(Exception):
                    c.remove(force=True)

    def _run_container(self) -> str:
        lim = self.limits
        c = self._client.containers.run(
            self.image,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            hostname="sandbox",
            mem_limit=f"{lim.memory_mb}m",
            memswap_limit=f"{lim.memory_mb}m",
            nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids,
            security_opt=["no-new-privileges"],
            init=True,  # reaps orphans: PID 1 `sleep` would leave zombies holding the pids limit
            labels={LABEL: self.id, PID_LABEL: str(os.getpid())},
            working_dir="/root",
        )
        return c.id

    async def _start(self) -> DockerSandbox:
        cid = await asyncio.to_thread(self._run_container)
        try:
            proc = await asyncio.create_subprocess_exec(
                "docker", "exec", "-i", cid, *_SHELL,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(_SETUP.encode())
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line.startswith(b"__agentrl_pid="):
                raise SandboxError(f"the sandbox shell did not start: {line!r}")
            box = DockerSandbox(self, cid, proc, int(line.split(b"=", 1)[1]))
        except BaseException:
            await self._remove(cid)
            raise
        self._live[cid] = box
        return box

    def _spawn_refill(self) -> None:
        async def refill() -> None:
            with contextlib.suppress(Exception):
                box = await self._start()
                if self._closed:
                    await box.close()
                else:
                    self._pool.put_nowait(box)

        t = asyncio.get_running_loop().create_task(refill())
        self._refill.add(t)
        t.add_done_callback(self._refill.discard)

    async def create(self) -> Sandbox:
        if self._client is None or self._closed:
            raise SandboxError("the backend is not open")
        while not self._pool.empty():
            box = self._pool.get_nowait()
            self._spawn_refill()
            if box._proc.returncode is None:
                return box
            await box.close()
        if self.pool_size:
            self._spawn_refill()
        try:
            return await self._start()
        except SandboxError:
            raise
        except Exception as e:
            raise SandboxError(f"could not start a sandbox container: {e}") from e

    async def _remove(self, cid: str) -> None:
        self._live.pop(cid, None)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._client.api.remove_container, cid, force=True)

    def _remove_all_sync(self) -> None:
        if self._client is None:
            return
        with contextlib.suppress(Exception):
            for c in self._client.containers.list(all=True, filters={"label": f"{LABEL}={self.id}"}):
                with contextlib.suppress(Exception):
                    c.remove(force=True)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for t in list(self._refill):
            t.cancel()
        await asyncio.gather(*self._refill, return_exceptions=True)
        while not self._pool.empty():
            await self._pool.get_nowait().close()
        await asyncio.gather(*(box.close() for box in list(self._live.values())), return_exceptions=True)
        if self._client is not None:
            await asyncio.to_thread(self._remove_all_sync)
            atexit.unregister(self._remove_all_sync)
            self._client.close()
            self._client = None
