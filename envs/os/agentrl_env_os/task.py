"""``os``: AgentBench's FC OS-interaction task — act in a Linux sandbox with bash, then answer.

Per session: a fresh sandbox (:mod:`agentrl_envs.sandbox`; bubblewrap by default, or Docker);
the sample's ``init`` scripts run as independent processes (a failure is a task error), its
``start`` script runs in the session's persistent shell (it may leave a background process), then
the model gets AgentBench's system prompt and the problem. ``bash_action`` runs a script in the
persistent shell (cwd, variables and background jobs persist) and returns AgentBench's
``The output of the OS:`` message, cut at ``max_output_chars`` (800). ``answer_action(answer)``
and ``finish_action(thought)`` both end the episode and judge the given text (as AgentBench does:
``finish_action``'s thought *is* the committed answer), by ``match`` or the ``check`` chain
(:mod:`.scoring`). 8 rounds.

Problems of the ``easy`` splits (:mod:`.make_easy`) carry ``"prompt": "easy"`` (a short system
prompt, the bare problem as user message) and ``"max_turns": 3``: a session's round limit is the
``max_turns`` option if set, else its sample's ``max_turns``, else 8. Tools and judging are the same.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentrl_envs.errors import DataError, ToolCallError
from agentrl_envs.protocol.agentrl import SampleStatus
from agentrl_envs.sandbox import Sandbox, SandboxBackend, SandboxError, SandboxLimits, SandboxStoppedError
from agentrl_envs.task import Task, TaskConfig, tool

from .prompts import NO_TOOL_CALL, opening_prompts, os_output
from .reference import reference_policy
from .samples import load_path, load_split, normalize
from .scoring import REGEX_TIMEOUT_S, evaluate_check, evaluate_match, init_command, script_command

#: Threads that judge ``match.regex`` answers (see ``OSTask._judge``): as many as the sessions a
#: worker admits by default (a session is judged once), made only when needed; each is held at
#: most ``regex_timeout_s``.
_REGEX_POOL = ThreadPoolExecutor(32, thread_name_prefix="os-regex")


class OSConfig(TaskConfig):
    """Options of the OS task.

    Sandbox:
        backend: ``bwrap`` (bubblewrap over a Debian rootfs; needs root) or ``docker``.
        rootfs: the root filesystem for ``bwrap`` (default: ``$AGENTRL_ROOTFS`` or the cache path).
        reap_interval_s: seconds between sweeps that remove what dead workers' sessions left
            (sandboxes, cgroups, containers); one sweep always runs at start (0: only that one).

    Limits (per session):
        memory_mb, pids, cpus: resources of the whole session.
        command_timeout_s: one ``bash_action`` (or init/check script) is interrupted after this.
        max_output_chars: tool output is cut here as AgentBench does (800).
        regex_timeout_s: seconds a ``match.regex`` judgement may take (then a ``task error``).
        max_turns: round limit of every session (unset: the sample's ``max_turns``, else 8).
    """

    backend: Literal["bwrap", "docker"] = Field("bwrap", description="Sandbox backend: 'bwrap' or 'docker'.")
    rootfs: str | None = Field(None, description="Root filesystem path for 'bwrap' (default $AGENTRL_ROOTFS).")
    reap_interval_s: float = Field(
        60.0, ge=0, description="Seconds between sweeps for dead workers' sandboxes (0: only at start)."
    )
    memory_mb: int = Field(512, ge=16, description="Memory limit of one session, MiB.")
    pids: int = Field(256, ge=8, description="Processes one session may hold at once.")
    cpus: float = Field(1.0, gt=0, description="CPU share of one session (cores).")
    command_timeout_s: float = Field(30.0, gt=0, description="Seconds one command may run.")
    max_output_chars: int = Field(800, gt=20, description="Characters of tool output before truncation.")
    regex_timeout_s: float = Field(
        REGEX_TIMEOUT_S, gt=0, le=60, description="Seconds a match.regex judgement may take (then a task error)."
    )

    def limits(self) -> SandboxLimits:
        return SandboxLimits(self.memory_mb, self.cpus, self.pids, self.command_timeout_s)


class OSTask(Task):
    name = "os"
    max_turns = 8
    #: ``easy`` (200 problems), ``easy-test`` (100, held out, for reporting) and ``easy-val`` (100,
    #: held out, for choosing settings): see :mod:`.make_easy`.
    splits = ("dev", "train", "easy", "easy-test", "easy-val")
    concurrency = 32
    Config = OSConfig

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)
    #: a problem file (``.json``/``.jsonl``; scripts in ``scripts/`` next to it, else its own dir)
    #: or a dir holding ``problems.json`` and ``scripts/``
    load_data = staticmethod(load_path)

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        try:
            return normalize(custom_task, None, where="custom_task")
        except DataError:
            raise
        except Exception as e:
            raise DataError(f"custom_task: {e}") from None

    #: a fresh :class:`~.reference.OSReferencePolicy` for the sample (it answers a ``match``, runs
    #: ``example`` and answers what it prints, or runs it and finishes), or ``None`` when no way to
    #: solve it is known
    reference_policy = staticmethod(reference_policy)

    # ------------------------------------------------------------------ worker resources

    @classmethod
    async def open_resources(cls, config: BaseModel) -> SandboxBackend:
        assert isinstance(config, OSConfig)
        backend: SandboxBackend
        if config.backend == "docker":
            try:
                from agentrl_envs.sandbox.docker import DockerBackend
            except ImportError as e:
                raise SandboxError(f"backend 'docker' is not available ({e}); use backend 'bwrap'") from None
            backend = DockerBackend(limits=config.limits(), reap_interval_s=config.reap_interval_s)  # type: ignore[call-arg]
        else:
            from agentrl_envs.sandbox.bwrap import BubblewrapBackend

            backend = BubblewrapBackend(config.rootfs, limits=config.limits(), reap_interval_s=config.reap_interval_s)
        await backend.open()
        return backend

    # ------------------------------------------------------------------ session

    #: the session's sandbox, from ``setup`` to ``teardown``
    box: Sandbox | None = None

    async def setup(self) -> list[dict[str, Any]]:
        if self.resources is None:
            raise RuntimeError("the OS task needs its sandbox backend: open it with TaskRuntime.open()")
        self.box = await self.resources.create()
        for i, script in enumerate(self.sample["init"]):
            r = await self.box.exec(init_command(script), args=[script["code"]])
            if not r.ok:
                raise RuntimeError(f"init script {i} failed (exit {r.exit_code}, timed out {r.timed_out}): {r.output[-500:]}")
        start = self.sample.get("start")
        if start is not None:
            code = start["code"] if start["language"] == "bash" else f"python3 -c {_sh_quote(start['code'])}"
            await self.box.shell(code)
        system, user = opening_prompts(self.sample)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    async def teardown(self) -> None:
        if self.box is not None:
            box, self.box = self.box, None
            await box.close()

    def no_tool_call_message(self) -> str:
        return NO_TOOL_CALL

    @tool
    async def bash_action(self, script: str) -> str:
        """Execute bash code to perform an operation in the Linux environment.

        Args:
            script: The bash script to be executed.
        """
        assert self.box is not None
        try:
            r = await self.box.shell(script)
        except SandboxStoppedError as e:
            return self._stopped_by_model(e)
        except SandboxError as e:
            self.finish(0.0, status=SampleStatus.TASK_ERROR, error=f"sandbox: {e}")
            return f"The OS environment stopped: {e}"
        text = r.output
        if r.timed_out:
            text += f"\n[the command timed out after {self.config.command_timeout_s:g} seconds and was interrupted]"
        return os_output(text, self.config.max_output_chars)

    @tool
    async def finish_action(self, thought: str) -> str:
        """Indicate that the task has been finished or need some additional information to be finished.

        Args:
            thought: The thought or reason indicating the task is finished.
        """
        return await self._judge(thought)

    @tool
    async def answer_action(self, answer: str) -> str:
        """Provide the answer to the question.

        Args:
            answer: The answer to the question.
        """
        return await self._judge(answer)

    def _stopped_by_model(self, e: SandboxStoppedError) -> str:
        """The model's commands stopped the session (``exit``, ``exec``, ``set -e``, a shell that
        hung past its interrupt): a failed episode, as AgentBench scores one whose shell is gone
        (its sample ends with result False, counted wrong), never a task error that would drop it
        from training and from the figures."""
        self.finish(0.0, status=SampleStatus.AGENT_INVALID_ACTION, error=f"sandbox: {e}")
        return f"The OS environment stopped: {e}"

    async def _judge(self, answer: str) -> str:
        s = self.sample
        if s.get("match"):
            try:
                # Off the event loop, in a pool of its own: a pathological pattern holds one regex
                # thread for at most regex_timeout_s (the GIL released), and no other session's
                # step waits on it (issue 38, finding 3: 8.1 s on the event loop before).
                loop = asyncio.get_running_loop()
                timeout = self.config.regex_timeout_s
                ok = await loop.run_in_executor(_REGEX_POOL, partial(evaluate_match, answer, s["match"], timeout=timeout))
            except TimeoutError:
                self.finish(
                    0.0,
                    status=SampleStatus.TASK_ERROR,
                    error=f"the task's match.regex ran over {timeout:g} s on the answer (a backtracking pattern)",
                )
                return "The answer could not be judged."
        else:
            # The check receives the answer as an argument (argv), which holds no NUL and at most
            # MAX_ARG_STRLEN bytes: a longer one raised E2BIG (probed), ending the episode `task error`.
            if "\x00" in answer:
                raise ToolCallError("the answer contains a NUL character (\\u0000), which the task's check cannot receive")
            if len(answer.encode()) >= MAX_ARG_BYTES:
                raise ToolCallError(f"the answer is longer than the task's check can receive ({MAX_ARG_BYTES - 1:,} bytes)")
            assert self.box is not None
            box = self.box

            async def run(script: dict[str, str], params: list[str]) -> Any:
                return await box.exec(script_command(script), args=[script["code"], *params])

            try:
                ok, _ = await evaluate_check(answer, s["check"], s.get("example"), run)
            except SandboxStoppedError as e:
                return self._stopped_by_model(e)
            except SandboxError as e:
                self.finish(0.0, status=SampleStatus.TASK_ERROR, error=f"sandbox: {e}")
                return "The OS environment stopped."
        self.finish(1.0 if ok else 0.0, result=ok)
        return "Your answer has been recorded."


#: Linux's MAX_ARG_STRLEN: the longest single argument of an exec, its NUL included (32 pages)
MAX_ARG_BYTES = 32 * os.sysconf("SC_PAGE_SIZE")


def _sh_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
