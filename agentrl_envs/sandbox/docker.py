"""The Docker sandbox backend: one container per session, a warm pool of ready ones.

Each sandbox is a container of ``image`` (default ``agentrl/base:latest``, imported by
``agentrl-envs build`` or by :meth:`DockerBackend.open` from the root filesystem) running
``sleep infinity`` as PID 1 with ``--network none``, a memory cap (swap included), a CPU share, a
pids limit, ``no-new-privileges`` and ``--init`` (reaps orphans); nothing from the host is
mounted. Every process in it is started through the engine's exec API over its socket (the docker
SDK; no ``docker`` CLI needed, so a worker in a container can use a mounted engine socket). Its
persistent shell is an interactive ``bash`` (interactive so that SIGINT ends the
running command, a pure-bash loop included, and leaves the shell alive; as in AgentBench's
terminal, starting a background job prints ``[1] PID``). A script is sent as
base64 and ``eval``'d with stdin from ``/dev/null`` (it cannot read the protocol), followed by a
unique marker carrying ``$?``.

The warm pool keeps ``pool_size`` containers started, each with its shell open, so
:meth:`DockerBackend.create` takes one at once and refills in the background; an empty pool
falls back to a cold start.

Nothing left behind: :meth:`~DockerBackend.close` removes the backend's containers, and an
``atexit`` hook does the same if the worker exits without closing. A worker killed with SIGKILL
runs neither, so every container also records its owner in labels: ``agentrl.sandbox=<backend
id>``, ``agentrl.sandbox.pid`` and ``agentrl.sandbox.pid.start`` (the worker process and its start
time, see :mod:`.owner`), ``agentrl.sandbox.pidns`` (its pid namespace) and, when the worker itself
runs in a container of the same engine (the ``agentrl/worker-os`` image, the engine's socket
mounted), ``agentrl.sandbox.container`` and ``agentrl.sandbox.container.started`` (that container's
id and ``State.StartedAt``). At :meth:`~DockerBackend.open` and every ``reap_interval_s`` seconds
while open, a backend removes the sandbox containers whose owner is gone:

* owner in a container: that container is gone, stopped, or started again since (its worker then
  is a new process); if it is this worker's own container, the pid check below decides;
* owner in this pid namespace: its pid no longer runs the process that started then;
* any other owner (a worker in a pid namespace this one cannot see, not in a container of this
  engine) is taken to be alive: its containers are its own business.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

from .base import CommandResult, Sandbox, SandboxBackend, SandboxError, SandboxLimits, SandboxStoppedError
from .owner import pid_namespace as _pidns
from .owner import process_alive, process_start_time

log = logging.getLogger(__name__)

LABEL = "agentrl.sandbox"
PID_LABEL = "agentrl.sandbox.pid"
START_LABEL = "agentrl.sandbox.pid.start"
PIDNS_LABEL = "agentrl.sandbox.pidns"
CONTAINER_LABEL = "agentrl.sandbox.container"
CONTAINER_STARTED_LABEL = "agentrl.sandbox.container.started"
#: Bytes of a command's output kept at its start and at its end when it writes more than twice this.
_KEEP = 1 << 20
_SHELL = ["bash", "--noprofile", "--norc", "--noediting", "-i"]
_SETUP = "PS1=; PS2=; PS0=; PROMPT_COMMAND=; set +H +m; exec 2>&1; echo __agentrl_pid=$$\n"


def own_container_id(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The id of the Docker container this process runs in, or ``None`` on a host.

    Docker bind-mounts ``<data-root>/containers/<id>/hostname`` on ``/etc/hostname`` of every
    container; the mount table shows the source path (``/proc/self/cgroup`` does not help: under
    a cgroup namespace it reads ``0::/``)."""
    try:
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/etc/hostname":
            m = re.search(r"/containers/([0-9a-f]{64})/hostname$", fields[3])
            if m:
                return m.group(1)
    return None


class _Exec:
    """A process started with the engine's exec API; stdin/stdout over its (multiplexed) socket."""

    def __init__(
        self, client: Any, exec_id: str, sock: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stderr: bool
    ) -> None:
        self._client = client
        self._stderr = stderr
        self.exec_id = exec_id
        self._sock = sock  # keeps the SDK's socket wrapper alive
        self._reader = reader
        self._writer = writer
        self.eof = False

    @classmethod
    async def start(cls, client: Any, container_id: str, cmd: list[str], *, stderr: bool = True) -> _Exec:
        """Start ``cmd``; ``stderr=False`` drops what it writes to stderr."""

        def create() -> tuple[str, Any]:
            exec_id = client.api.exec_create(container_id, cmd, stdin=True, stdout=True, stderr=True)["Id"]
            return exec_id, client.api.exec_start(exec_id, socket=True)

        exec_id, sock = await asyncio.to_thread(create)
        raw = getattr(sock, "_sock", sock)
        raw.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=raw)
        return cls(client, exec_id, sock, reader, writer, stderr)

    async def read(self) -> bytes:
        """The next frame's payload (stdout, or stderr if kept); ``b""`` at end of stream."""
        try:
            while True:
                header = await self._reader.readexactly(8)
                payload = await self._reader.readexactly(int.from_bytes(header[4:], "big"))
                if header[0] != 2 or self._stderr:
                    return payload
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eof = True
            return b""

    async def write(self, data: bytes, *, eof: bool = False) -> None:
        self._writer.write(data)
        if eof:
            self._writer.write_eof()
        await self._writer.drain()

    async def exit_code(self) -> int | None:
        info = await asyncio.to_thread(self._client.api.exec_inspect, self.exec_id)
        return None if info.get("Running") else info.get("ExitCode")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


def _force_remove(client: Any, cid: str) -> None:
    try:
        client.api.remove_container(cid, force=True)
    except Exception:
        pass


class DockerSandbox(Sandbox):
    """One session's container and its shell; made by :class:`DockerBackend`."""

    def __init__(self, backend: DockerBackend, container_id: str, proc: _Exec, shell_pid: int) -> None:
        self._backend = backend
        self.container_id = container_id
        self._proc = proc
        self._shell_pid = shell_pid
        self._closed = False
        self._dead = False

    async def _run_quiet(self, *cmd: str) -> None:
        """Run a short helper command (kill, pkill) in the container, ignoring what it says."""
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._backend._client.containers.get(self.container_id).exec_run, list(cmd))

    async def _read_until(self, marker: bytes, deadline: float) -> tuple[bytes, bytes | None]:
        """Read the shell's stdout until ``marker`` + the rest of its line; ``(before, line)`` or ``(buf, None)`` on timeout/EOF."""
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
                chunk = await asyncio.wait_for(self._proc.read(), left)
            except TimeoutError:
                return bytes(buf), None
            if not chunk:
                self._dead = True
                return bytes(buf), None
            buf += chunk
            if len(buf) > 2 * _KEEP:  # a command flooding its output: keep its head and tail only
                del buf[_KEEP : len(buf) - _KEEP]
                buf[_KEEP:_KEEP] = b"\n[... output cut ...]\n"

    async def shell(self, script: str, timeout: float | None = None) -> CommandResult:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._dead or self._proc.eof:
            raise SandboxStoppedError("the session's shell is gone (it exited, was killed or stopped answering)")
        timeout = self._backend.limits.command_timeout_s if timeout is None else timeout
        marker = f"__agentrl_done_{secrets.token_hex(8)}__".encode()
        b64 = base64.b64encode(script.encode()).decode()
        line = f"eval \"$(printf %s '{b64}' | base64 -d)\" </dev/null; printf '%s%d\\n' '{marker.decode()}' $?\n"
        try:
            await self._proc.write(line.encode())
        except (BrokenPipeError, ConnectionError) as e:
            self._dead = True
            raise SandboxError(f"the session's shell is gone: {e}") from None  # its stream broke: the engine's
        out, tail = await self._read_until(marker, time.monotonic() + timeout)
        if tail is not None:
            return CommandResult(int(tail), out.decode(errors="replace"))
        if self._dead:
            return CommandResult(None, out.decode(errors="replace"))
        return await self._interrupt(out)

    async def _interrupt(self, out: bytes) -> CommandResult:
        """SIGINT the shell's process group, SIGKILL its children if that is not enough, resync."""
        await self._run_quiet("kill", "-INT", "--", f"-{self._shell_pid}")
        marker = f"__agentrl_sync_{secrets.token_hex(8)}__".encode()
        with contextlib.suppress(BrokenPipeError, ConnectionError):
            await self._proc.write(b"\nprintf '%s%d\\n' '" + marker + b"' 0\n")
        more, tail = await self._read_until(marker, time.monotonic() + 2.0)
        if tail is None and not self._dead:
            await self._run_quiet("pkill", "-KILL", "-P", str(self._shell_pid))
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
        # coreutils `timeout` inside the container kills the command itself, not just our stream.
        cmd = ["timeout", "-k", "1", f"{timeout}", "bash", "-c", script, "bash", *args]
        try:
            proc = await _Exec.start(self._backend._client, self.container_id, cmd)
        except Exception as e:
            raise SandboxError(f"the sandbox is gone: {e}") from None
        out = bytearray()
        t0 = time.monotonic()

        async def collect() -> None:
            await proc.write((stdin or "").encode(), eof=True)
            while chunk := await proc.read():
                out.extend(chunk)

        try:
            await asyncio.wait_for(collect(), timeout + 10)
        except TimeoutError:
            return CommandResult(None, out.decode(errors="replace"), timed_out=True)
        finally:
            proc.close()
        code = await proc.exit_code()
        # 124/137 from `timeout` only when the time is up: an OOM-killed command also exits 137.
        timed_out = code in (124, 137) and time.monotonic() - t0 >= timeout
        return CommandResult(None if timed_out else code, out.decode(errors="replace"), timed_out=timed_out)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._proc.close()
        await self._backend._remove(self.container_id)


class DockerBackend(SandboxBackend):
    """Containers from ``image``; ``pool_size`` of them kept warm (0 disables the pool);
    ``reap_interval_s``: seconds between sweeps for dead workers' containers while open (one sweep
    always runs at :meth:`open`; 0: only that one)."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        image: str = "agentrl/base:latest",
        pool_size: int = 2,
        build: bool = True,
        reap_interval_s: float = 60.0,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.image = image
        self.pool_size = pool_size
        self.build = build
        self.reap_interval_s = reap_interval_s
        self.id = secrets.token_hex(6)
        self._owner_labels: dict[str, str] = {}
        self._own_container: str | None = None
        self._reaper: asyncio.Task[None] | None = None
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
        if self.reap_interval_s > 0:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_every(self.reap_interval_s))

    async def _reap_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self._reap_orphans, self._client)
            except Exception:
                log.warning("sweeping dead workers' sandbox containers failed; retrying in %g s", interval_s, exc_info=True)

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
        self._owner_labels = self._owner(client)
        self._reap_orphans(client)
        return client

    def _owner(self, client: Any) -> dict[str, str]:
        """The labels naming this worker as the owner of a container (see the module docstring)."""
        pid = os.getpid()
        labels = {LABEL: self.id, PID_LABEL: str(pid), START_LABEL: str(process_start_time(pid) or 0), PIDNS_LABEL: _pidns()}
        cid = own_container_id()
        if cid is not None:
            try:  # only if this engine runs it: the mounted socket may be another engine's
                started = client.api.inspect_container(cid)["State"]["StartedAt"]
            except Exception:
                return labels
            self._own_container = cid
            labels |= {CONTAINER_LABEL: cid, CONTAINER_STARTED_LABEL: started}
        return labels

    def _owner_alive(self, client: Any, labels: dict[str, str]) -> bool:
        """Whether the worker that made a container with these labels may still be running."""
        from docker.errors import NotFound

        container = labels.get(CONTAINER_LABEL)
        if container:
            try:
                state = client.api.inspect_container(container)["State"]
            except NotFound:
                return False
            except Exception:
                return True  # the engine did not answer: judge it at the next sweep
            if not state.get("Running") or state.get("StartedAt") != labels.get(CONTAINER_STARTED_LABEL):
                return False  # stopped, or started again since: its worker was a process now gone
            if container != self._own_container:
                return True  # running, and this worker cannot look into its processes
        pid, start = labels.get(PID_LABEL, ""), labels.get(START_LABEL, "")
        if labels.get(PIDNS_LABEL) != _pidns() or not pid.isdigit():
            return True  # a pid namespace this worker cannot see
        return process_alive(int(pid), int(start) if start.isdigit() and start != "0" else None)

    def _reap_orphans(self, client: Any) -> list[str]:
        """Remove the sandbox containers of dead workers (never this backend's); their ids."""
        removed = []
        for c in client.api.containers(all=True, filters={"label": LABEL}):
            labels = c.get("Labels") or {}
            if labels.get(LABEL) == self.id or self._owner_alive(client, labels):
                continue
            with contextlib.suppress(Exception):
                client.api.remove_container(c["Id"], force=True)
                removed.append(c["Id"])
        if removed:
            log.info("removed %d sandbox containers of dead workers", len(removed))
        return removed

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
            labels=self._owner_labels,
            working_dir="/root",
        )
        return c.id

    async def _start(self) -> DockerSandbox:
        started = asyncio.ensure_future(asyncio.to_thread(self._run_container))
        try:
            cid = await asyncio.shield(started)
        except asyncio.CancelledError:
            # The engine still creates the container: remove it once it exists.
            started.add_done_callback(lambda f: f.cancelled() or f.exception() or self._remove_later(f.result()))
            raise
        try:
            # Only bash's start-up notices and first prompt go to stderr: _SETUP sends it to stdout.
            proc = await _Exec.start(self._client, cid, _SHELL, stderr=False)
            await proc.write(_SETUP.encode())
            buf = b""
            while not re.search(rb"__agentrl_pid=(\d+)\n", buf):
                chunk = await asyncio.wait_for(proc.read(), 30)
                if not chunk:
                    raise SandboxError(f"the sandbox shell did not start: {buf[-500:]!r}")
                buf += chunk
            pid = re.search(rb"__agentrl_pid=(\d+)\n", buf)
            assert pid is not None
            box = DockerSandbox(self, cid, proc, int(pid.group(1)))
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
            if not box._proc.eof:
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

    def _remove_later(self, cid: str) -> None:
        client = self._client
        if client is not None:
            threading.Thread(target=_force_remove, args=(client, cid), daemon=True).start()

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
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reaper
            self._reaper = None
        # Not cancelled: a container being started is then closed by its refill task itself.
        await asyncio.gather(*self._refill, return_exceptions=True)
        while not self._pool.empty():
            await self._pool.get_nowait().close()
        await asyncio.gather(*(box.close() for box in list(self._live.values())), return_exceptions=True)
        if self._client is not None:
            await asyncio.to_thread(self._remove_all_sync)
            atexit.unregister(self._remove_all_sync)
            self._client.close()
            self._client = None
