"""The bubblewrap backend: each session is a ``bwrap`` sandbox over a shared read-only rootfs.

Layout and isolation (the contract the security tests check):

* **File system.** bwrap 0.8 (Debian 12) has no ``--overlay``; the launcher instead mounts a
  kernel overlayfs (lower: the read-only rootfs of :mod:`.rootfs`; upper/work: the session's own
  dir under ``base_dir``) inside a private mount namespace (``_launch.py``) and binds it as
  ``/``. Every session sees the whole Debian tree writable and copy-on-write; nothing of the host
  is mounted. The mount dies with the namespace, the session dir is removed on ``close``.
* **Namespaces.** ``--unshare-all`` (pid, net: only loopback, ipc, uts, cgroup), a hostname,
  ``--new-session``, ``--die-with-parent``; ``/proc`` and a minimal ``/dev``.
* **User.** Root inside (as in AgentBench's containers) with only Docker's default capabilities,
  in bubblewrap's own user namespace where uid 0 is the only id mapped.
* **System calls.** Every process of a session runs under :mod:`.seccomp`'s filter (bubblewrap
  loads it into the shell, ``_enter.py`` into each command it runs), in both launch modes.
* **Environment.** Nothing of the worker's: the processes that start and enter a sandbox get the
  standard ``PATH`` alone (:func:`.bwrap_host.helper_env`), and the session's commands :func:`sandbox_env`.
* **Limits.** memory and pids through a cgroup per session (:mod:`.cgroups`) where cgroups are
  writable; else (a container) ``RLIMIT_NPROC`` per session and ``RLIMIT_DATA`` per process
  (``_launch.py``). A command past its timeout is interrupted (SIGINT to the shell's process
  group, then SIGKILL to what is left).
* **Processes.** Every sandbox process carries ``AGENTRL_SANDBOX=<session id>`` in its
  environment; ``close`` kills the cgroup's processes and bwrap (its pid-namespace init takes the
  rest with it) and removes the session dir.
* **Nothing left behind.** A session id is ``<worker pid>-<its start time>-<random>`` (see
  :mod:`.owner`); it names the session dir and its cgroups. When the worker is killed (SIGKILL
  included), ``--die-with-parent`` and the end of the sandbox's pid namespace kill every process
  of its sessions; their dirs and (empty) cgroups stay. :func:`.bwrap_host.reap_stale_sessions`
  removes the session dirs and cgroups whose worker is gone, killing any process still in them; it
  runs at ``open`` and every ``reap_interval_s`` seconds while the backend is open, so a worker
  sweeps what a dead one left, also when they use different ``base_dir`` s (cgroups are shared by all).
  Workers sharing a cgroup tree are taken to share a pid namespace (pids of another mean nothing).

Two launch modes (``_launch.py``), the same sandbox inside:

* ``root``: the worker is root with every capability (on a host, or a privileged container); the
  overlay is mounted in a private mount namespace of the host's user namespace.
* ``userns`` (automatic when the worker lacks CAP_SYS_ADMIN): the worker is an ordinary user, e.g.
  the socket-free OS worker container (``envs/os/Dockerfile``), holding no capability. Each
  session first gets a user namespace where the worker's uid is root and, given an ``/etc/subuid``
  range, ids 1..65536 are that range (``newuidmap``); the overlay is mounted there (``userxattr``),
  then bubblewrap runs as that root. The rootfs must be owned accordingly (root's files by the
  worker's uid: the image shifts them), ``base_dir`` must not be on overlayfs (a tmpfs), and user
  namespaces and a fresh ``/proc`` must be allowed (:func:`.bwrap_host.userns_problem` checks at ``open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .base import CommandResult, Sandbox, SandboxBackend, SandboxError, SandboxLimits, SandboxStoppedError
from .bwrap_host import (
    LAUNCH,
    PATH,
    has_full_root,
    helper_env,
    missing_requirements,
    reap_stale_sessions,
    remove_session_dir,
    userns_problem,
)
from .cgroups import SessionCgroup, cgroup_parents
from .owner import owner_token
from .rootfs import default_rootfs_path
from .seccomp import filter_fd, session_filter

log = logging.getLogger(__name__)

DEFAULT_BASE_DIR = Path(os.environ.get("AGENTRL_SANDBOX_DIR", "/tmp/agentrl-sandboxes"))
MARKER_ENV = "AGENTRL_SANDBOX"
CAPS = (
    "CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID CAP_SETUID CAP_SETPCAP "
    "CAP_NET_BIND_SERVICE CAP_NET_RAW CAP_SYS_CHROOT CAP_AUDIT_WRITE CAP_SETFCAP"
).split()
_READ = 65536
#: Run as a file with the standard library only (see :meth:`BubblewrapSandbox.exec`).
_ENTER = str(Path(__file__).with_name("_enter.py"))


def sandbox_env(session_id: str) -> dict[str, str]:
    return {"PATH": PATH, "HOME": "/root", "TERM": "dumb", "LANG": "C.UTF-8", "USER": "root", MARKER_ENV: session_id}


class BubblewrapBackend(SandboxBackend):
    """Creates :class:`BubblewrapSandbox` es. ``rootfs=None``: :func:`.rootfs.default_rootfs_path`.

    ``reap_interval_s``: seconds between sweeps for dead workers' sessions while open (one sweep
    always runs at ``open``; 0: only that one)."""

    def __init__(
        self,
        rootfs: Path | str | None = None,
        *,
        limits: SandboxLimits | None = None,
        base_dir: Path | None = None,
        reap_interval_s: float = 60.0,
        userns: bool | None = None,
    ) -> None:
        self.rootfs = Path(rootfs) if rootfs else default_rootfs_path()
        #: Unprivileged mode (see the module doc); ``None``: when this process is not root with
        #: every capability (a worker in a container without the engine's socket).
        self.userns = (not has_full_root()) if userns is None else userns
        self.limits = limits or SandboxLimits()
        self.base_dir = Path(base_dir) if base_dir else DEFAULT_BASE_DIR
        self.reap_interval_s = reap_interval_s
        self.cgroup_parents: list[Path] = []
        self._open: set[BubblewrapSandbox] = set()
        self._opened = False
        self._reaper: asyncio.Task[None] | None = None

    async def open(self) -> None:
        problem = missing_requirements(self.rootfs, userns=self.userns)
        if problem:
            raise SandboxError(problem)
        session_filter()  # compiled once; raises SandboxError, with the fix, without libseccomp
        self.base_dir.mkdir(parents=True, exist_ok=True)
        problem = await asyncio.to_thread(userns_problem, self.base_dir) if self.userns else None
        if problem:
            raise SandboxError(problem)
        self.cgroup_parents = cgroup_parents()
        if not self.cgroup_parents:
            log.info(
                "no writable cgroups: per-process limits instead (RLIMIT_NPROC %d per session, RLIMIT_DATA %d MiB per process)",
                self.limits.pids,
                self.limits.memory_mb,
            )
        await self.reap()
        self._opened = True
        if self.reap_interval_s > 0:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_every(self.reap_interval_s))

    async def reap(self) -> list[str]:
        """Remove the sessions (dirs, cgroups, processes) of workers that are gone; their ids."""
        reaped = await asyncio.to_thread(reap_stale_sessions, self.base_dir, self.cgroup_parents, userns=self.userns)
        if reaped:
            log.info("removed %d sandbox sessions of dead workers: %s", len(reaped), ", ".join(reaped))
        return reaped

    async def _reap_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.reap()
            except Exception:
                log.warning("sweeping dead workers' sandboxes failed; retrying in %g s", interval_s, exc_info=True)

    async def create(self) -> Sandbox:
        if not self._opened:
            raise SandboxError("BubblewrapBackend.create() before open()")
        box = BubblewrapSandbox(self)
        self._open.add(box)
        try:
            await box.start()
        except BaseException:
            await box.close()
            raise
        return box

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reaper
            self._reaper = None
        boxes, self._open = list(self._open), set()
        await asyncio.gather(*(b.close() for b in boxes), return_exceptions=True)
        self._opened = False


class BubblewrapSandbox(Sandbox):
    """One session. ``shell`` talks to a long-lived ``bash -i`` over pipes (stderr merged)."""

    def __init__(self, backend: BubblewrapBackend) -> None:
        self.backend = backend
        self.limits = backend.limits
        self.id = f"{owner_token()}-{secrets.token_hex(6)}"
        self.dir = backend.base_dir / self.id
        self.cgroup: SessionCgroup | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.init_pid: int | None = None
        self.closed = False
        self._stuck = False  # closed because its shell no longer answered (see _interrupt)
        self._buf = b""
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- start

    async def start(self) -> None:
        for sub in ("upper", "work", "merged"):
            (self.dir / sub).mkdir(parents=True)
        if self.backend.cgroup_parents:
            self.cgroup = SessionCgroup.create(self.backend.cgroup_parents, self.id, self.limits)
        rd, wr = os.pipe()
        program = filter_fd()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self._launch_argv(info_fd=wr, seccomp_fd=program),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(wr, program),
                start_new_session=True,
                env=helper_env(),
            )
        finally:
            os.close(wr)
            os.close(program)
        info = await asyncio.to_thread(_read_all, rd)
        try:
            self.init_pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError):
            out = await self._drain_now()
            raise SandboxError(f"bwrap did not start: {out.strip()[-2000:] or 'no output'}") from None
        # A prompt-free, history-free shell; the first marker also proves it is up.
        result = await self.shell("PS1=''; PS2=''; PROMPT_COMMAND=''; set +H; cd /root", timeout=30)
        if result.exit_code != 0:
            raise SandboxError(f"the sandbox shell did not start: {result.output[-2000:]}")

    def _launch_argv(self, info_fd: int, seccomp_fd: int) -> list[str]:
        d, backend = self.dir, self.backend
        bwrap = [shutil.which("bwrap") or "bwrap", "--bind", str(d / "merged"), "/", "--proc", "/proc", "--dev", "/dev"]
        bwrap += ["--unshare-all", "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
        for k, v in sandbox_env(self.id).items():
            bwrap += ["--setenv", k, v]
        bwrap += ["--cap-drop", "ALL"] + [a for c in CAPS for a in ("--cap-add", c)]
        bwrap += [
            "--chdir",
            "/root",
            "--info-fd",
            str(info_fd),
            "--seccomp",
            str(seccomp_fd),
            "/bin/bash",
            "--norc",
            "--noprofile",
            "--noediting",
            "-i",
        ]
        procs = ":".join(str(f) for f in (self.cgroup.procs_files if self.cgroup else []))
        # Without a cgroup, per-process rlimits stand in (userns mode: see _launch.py).
        nproc = self.limits.pids if self.cgroup is None else 0
        data = self.limits.memory_mb * 2**20 if self.cgroup is None else 0
        mode = "userns" if backend.userns else "root"
        layers = [str(backend.rootfs), str(d / "upper"), str(d / "work"), str(d / "merged")]
        return [sys.executable, "-I", LAUNCH, mode, procs, str(nproc), str(data), *layers, "--", *bwrap]

    async def _drain_now(self) -> str:
        if self.proc and self.proc.stdout:
            with contextlib.suppress(asyncio.TimeoutError):
                self._buf += await asyncio.wait_for(self.proc.stdout.read(_READ), 2)
        return self._buf.decode("utf-8", "replace")

    # ---------------------------------------------------------------- commands

    async def shell(self, script: str, timeout: float | None = None) -> CommandResult:
        timeout = self.limits.command_timeout_s if timeout is None else timeout
        async with self._lock:
            proc = self._alive()
            assert proc.stdin is not None
            nonce = secrets.token_hex(8)
            marker = f"__AGENTRL_END_{nonce}_".encode()
            encoded = _b64(script)
            line = f"eval \"$(printf %s {encoded} | base64 -d)\" </dev/null; printf '\\n{marker.decode()}%s\\n' $?\n"
            try:
                proc.stdin.write(line.encode())
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                raise self._gone() from None
            try:
                out, code = await asyncio.wait_for(self._read_until(marker), timeout)
                return CommandResult(code, out, False)
            except TimeoutError:
                pass
            partial = self._take_buffer()
            recovered = await self._interrupt(marker)
            if recovered is None:
                return CommandResult(None, partial, True)
            return CommandResult(None, partial + recovered, True)

    async def _read_until(self, marker: bytes) -> tuple[str, int | None]:
        proc = self._alive()
        assert proc.stdout is not None
        while True:
            i = self._buf.find(marker)
            if i >= 0:
                end = self._buf.find(b"\n", i)
                if end >= 0:
                    out, rest = self._buf[:i], self._buf[end + 1 :]
                    code_txt = self._buf[i + len(marker) : end]
                    self._buf = rest
                    if out.endswith(b"\n"):
                        out = out[:-1]  # the newline our printf put before the marker
                    text = out.decode("utf-8", "replace")
                    return text, int(code_txt) if code_txt.isdigit() else None
            chunk = await proc.stdout.read(_READ)
            if not chunk:  # the shell's output closed: it exited (its status, once reaped, says how)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 1)
                raise self._gone()
            self._buf += chunk

    def _take_buffer(self) -> str:
        out, self._buf = self._buf, b""
        return out.decode("utf-8", "replace")

    async def _interrupt(self, marker: bytes) -> str | None:
        """SIGINT the shell's foreground; if the shell does not answer, SIGKILL everything but the
        shell and init. Return the output after the interrupt, or ``None`` if the shell is gone.

        A fresh recovery marker is written after the interrupt; the shell handles its input in
        order, so whatever the interrupted line still printed (its own marker included) comes
        first and is dropped with it."""
        pgid = self.init_pid  # bwrap's --new-session makes the sandbox init the group leader
        if pgid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGINT)
        assert self.proc is not None and self.proc.stdin is not None
        recover = f"__AGENTRL_END_{secrets.token_hex(8)}_".encode()
        with contextlib.suppress(OSError):
            self.proc.stdin.write(f"printf '\\n{recover.decode()}%s\\n' 130\n".encode())
        for wait in (1.0, 3.0):
            try:
                out, _ = await asyncio.wait_for(self._read_until(recover), wait)
                return _drop_marker_line(out, marker)
            except TimeoutError:
                self._kill_all_but_shell()
            except SandboxError:
                return None
        self._stuck = True
        await self.close()
        return None

    def _kill_all_but_shell(self) -> None:
        shell = _children(self.init_pid) if self.init_pid else []
        keep = {self.init_pid, *shell[:1], self.proc.pid if self.proc else None}
        for pid in self._session_pids():
            if pid not in keep:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _session_pids(self) -> set[int]:
        if self.cgroup:
            return self.cgroup.pids()
        return set(_descendants(self.init_pid)) if self.init_pid else set()

    def _alive(self) -> asyncio.subprocess.Process:
        if self.closed or self.proc is None or self.proc.returncode is not None:
            raise self._gone()
        return self.proc

    def _gone(self) -> SandboxError:
        """The error for a call on a session that no longer runs."""
        if self._stuck:
            return SandboxStoppedError("the sandbox's shell did not answer after its command was interrupted; it was stopped")
        if self.closed:
            return SandboxError("the sandbox is closed")
        if self.cgroup and self.cgroup.oom_killed():
            return SandboxStoppedError(f"the sandbox was killed: out of memory (limit {self.limits.memory_mb} MiB)")
        code = self.proc.returncode if self.proc else None
        return SandboxStoppedError("the sandbox's shell exited" + (f" (status {code})" if code is not None else ""))

    async def exec(
        self, script: str, timeout: float | None = None, *, stdin: str | None = None, args: Sequence[str] = ()
    ) -> CommandResult:
        timeout = self.limits.command_timeout_s if timeout is None else timeout
        self._alive()
        procs = ":".join(str(f) for f in (self.cgroup.procs_files if self.cgroup else []))
        env = [f"{k}={v}" for k, v in sandbox_env(self.id).items()]
        # The file, not `-m`: `-m` imports the agentrl_envs package first, and anything it pulls in
        # that starts a thread (numpy's BLAS pool, via gymnasium) makes setns(CLONE_NEWNS) fail
        # with EINVAL (a multithreaded process cannot join a mount namespace).
        userns_pid = self.proc.pid if self.backend.userns and self.proc else 0
        program = filter_fd()
        argv = [sys.executable, "-I", _ENTER, str(self.init_pid), str(userns_pid), procs, "/root", str(program), "--"]
        argv += [*env, "--", "/bin/bash", "-c", script, "bash", *args]
        # No stdin → /dev/null (an empty stdin, as AgentBench gives): writing b"" to a pipe whose
        # reader already exited raised "handler is closed" under uvloop in 32-48 of 200 sessions.
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(program,),
                start_new_session=True,
                env=helper_env(),
            )
        finally:
            os.close(program)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(None if stdin is None else stdin.encode()), timeout)
            return CommandResult(proc.returncode, out.decode("utf-8", "replace"), False)
        except TimeoutError:
            with contextlib.suppress(OSError):
                proc.kill()
            await proc.wait()
            return CommandResult(None, "", True)
        except BaseException:
            with contextlib.suppress(OSError):
                proc.kill()
            raise

    # ---------------------------------------------------------------- close

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.backend._open.discard(self)
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(self._teardown))

    def _teardown(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.proc.kill()
        if self.cgroup is not None:
            self.cgroup.kill_and_remove()
        elif self.init_pid:
            self._kill_without_cgroup()
        remove_session_dir(self.dir, userns=self.backend.userns)

    def _kill_without_cgroup(self) -> None:
        """No cgroup to kill as one (a container without writable cgroups): stop, then kill, every
        process of the session, found as the init's descendants and by the session's marker in
        their environment (a process whose parent died is reparented out of the tree), again until
        none is left. One pass raced a fork bomb: processes forked between the listing and the
        kills, or orphaned by them, survived the close (CI, in the OS worker's container)."""
        needle, init = f"{MARKER_ENV}={self.id}".encode(), self.init_pid or 0
        for _ in range(200):  # ~4 s at most; a pass of a 64-process bomb takes a few ms
            pids = _marked(needle) | {p for p in _descendants(init) if _running(p)}
            if not pids:
                return
            for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none forks during the kills
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            time.sleep(0.02)


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while chunk := os.read(fd, _READ):
            chunks.append(chunk)
            if b"}" in chunk:
                break
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _drop_marker_line(text: str, marker: bytes) -> str:
    m = marker.decode()
    return "".join(line for line in text.splitlines(keepends=True) if m not in line).strip("\n")


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _running(pid: int) -> bool:
    """Not gone and not a zombie (a killed process waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _marked(needle: bytes) -> set[int]:
    """Live pids whose environment holds ``needle`` (zombies' environments read empty)."""
    out = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read():
                        out.add(int(entry.name))
            except OSError:
                continue
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out
