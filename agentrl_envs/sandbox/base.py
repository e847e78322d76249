"""The backend-neutral sandbox interface.

A :class:`SandboxBackend` lives as long as a worker process (``open`` once, ``create`` one
:class:`Sandbox` per session, ``close`` at exit). A :class:`Sandbox` is one isolated machine-like
place: its own writable root filesystem, its own processes, no network but loopback, uid 0 inside.

Two ways to run commands in it:

* :meth:`Sandbox.shell` writes a script to the session's *one persistent interactive bash*: the
  working directory, variables, functions and background jobs persist between calls, as in a
  terminal the model types into.
* :meth:`Sandbox.exec` runs an independent ``bash -c`` process in the same sandbox (same files,
  fresh shell state), for a task's init and check scripts.

Output is stdout and stderr merged, decoded as UTF-8 with replacement. A command that runs past
its timeout is interrupted and reported with ``timed_out=True`` (``exit_code`` is then whatever
the interrupted command returned, or ``None``). Errors of the sandbox itself (it died, it could not
start) raise :class:`SandboxError`; a failing command is not an error, it is a non-zero exit code.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import TaskError


class SandboxError(TaskError, RuntimeError):
    """The sandbox could not start, was closed, or its engine failed: not the commands' fault.
    (Still a ``RuntimeError`` for callers that caught it as one.)"""

    code = "sandbox_error"


class SandboxStoppedError(SandboxError):
    """What ran in the session stopped it: its shell exited (``exit``, ``exec``, ``set -e``, a kill
    of ``$$``), was killed for memory, or no longer answered after its command was interrupted.
    A task decides whose fault that is (the OS task: the model's, as AgentBench scores it)."""

    code = "sandbox_stopped"


@dataclass(frozen=True)
class CommandResult:
    """What one command did.

    Attributes:
        exit_code: The command's exit status; ``None`` when there is none (killed, timed out
            without returning).
        output: stdout and stderr merged, in the order written.
        timed_out: True when the command ran past its timeout and was interrupted.
    """

    exit_code: int | None
    output: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class SandboxLimits:
    """Per-session resource limits a backend enforces.

    Attributes:
        memory_mb: Memory of the whole session (all its processes), in MiB.
        cpus: CPU share (1.0 = one core); backends that cannot cap CPU share ignore it.
        pids: Processes/threads the session may hold at once (stops fork bombs).
        command_timeout_s: Default wall-clock limit of one command.
    """

    memory_mb: int = 512
    cpus: float = 1.0
    pids: int = 256
    command_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.memory_mb < 16 or self.pids < 8 or self.cpus <= 0 or self.command_timeout_s <= 0:
            raise ValueError(f"limits too small to run a shell: {self}")


class Sandbox(abc.ABC):
    """One session's sandbox. Not safe for concurrent commands: run one at a time."""

    @abc.abstractmethod
    async def shell(self, script: str, timeout: float | None = None) -> CommandResult:
        """Run ``script`` in the session's persistent interactive bash and wait for it.

        ``timeout`` defaults to the backend's ``command_timeout_s``. On timeout the running
        command is interrupted (SIGINT, then killed) and the shell stays usable where possible;
        if the shell itself is gone, the next call raises :class:`SandboxError`.
        """

    @abc.abstractmethod
    async def exec(
        self,
        script: str,
        timeout: float | None = None,
        *,
        stdin: str | None = None,
        args: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``bash -c script bash *args`` as a new process in the sandbox (``$1``... = args).

        ``stdin`` is fed to it (``None``: empty stdin). Shell state of :meth:`shell` is not shared,
        the file system and processes are.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill every process of the session and remove its files. Idempotent, never raises."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SandboxBackend(abc.ABC):
    """Creates sandboxes; one per worker process."""

    limits: SandboxLimits

    @abc.abstractmethod
    async def open(self) -> None:
        """Check and prepare what every sandbox needs (binary, image, root filesystem).

        Raises :class:`SandboxError` with a message saying how to fix what is missing."""

    @abc.abstractmethod
    async def create(self) -> Sandbox:
        """Start a new sandbox, ready for commands. Raises :class:`SandboxError` if it cannot."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every sandbox still open and release the backend. Idempotent."""

    async def __aenter__(self) -> SandboxBackend:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
