"""What the in-process checks and the wire checks share: the skip, the message without a tool
call, the statuses a model's round may end an episode with, the split a check defaults to, and
how a long text is shortened into a message."""

from __future__ import annotations

from ..protocol.agentrl import SampleStatus
from ..task import Task

#: The turn-limit check plays at most this many rounds; a longer limit is lowered to 3 for it.
MAX_PLAYED_TURNS = 20
LOWERED_LIMIT = 3
#: The assistant message of a round without a tool call.
NO_CALL = {"role": "assistant", "content": "I will not call a tool this time."}
#: How a round may end an episode when the model made a mistake or played on: statuses of
#: AgentRL's protocol that put the outcome on the model. ``task error``, ``cancelled`` and
#: ``unknown`` say the task or the infrastructure failed, which a model's round never is.
MODEL_ENDS = (
    SampleStatus.COMPLETED.value,
    SampleStatus.AGENT_VALIDATION_FAILED.value,
    SampleStatus.AGENT_INVALID_ACTION.value,
    SampleStatus.AGENT_CONTEXT_LIMIT.value,
    SampleStatus.TASK_LIMIT_REACHED.value,
)


def model_end_note(what: str, status: str, how: str, where: str, fresh: str) -> str:
    """The note for a bad call (``what``) whose round ended the episode, once the status is checked
    to be one of :data:`MODEL_ENDS` (``how``: the end as a message says it; ``fresh``: what the next
    case plays on)."""
    assert status in MODEL_ENDS, (
        f"{where}: expected the episode to go on, or to end with a status that puts the mistake on the model"
        f" ({', '.join(map(repr, MODEL_ENDS))}), got it ended ({how})"
    )
    return f"{what}: the episode ends ({how}); the next case plays on a new {fresh}"


class ConformanceSkip(Exception):
    """A check that cannot apply to this task; the message says why."""


def default_split(task_cls: type[Task]) -> str | None:
    """``"dev"`` if the task ships it, else its first split (``None`` if it names none)."""
    return "dev" if "dev" in task_cls.splits else (task_cls.splits[0] if task_cls.splits else None)


def split_of(task_cls: type[Task], split: str | None) -> str | None:
    """``split``, or the task's :func:`default_split` when it is ``None``."""
    return split if split is not None else default_split(task_cls)


def shorten(text: object, limit: int = 400) -> str:
    """One line; a long text keeps its head and its tail (where a traceback says what failed)."""
    flat = " | ".join(line.strip() for line in str(text).splitlines() if line.strip())
    return flat if len(flat) <= limit else f"{flat[: limit // 2]} ... {flat[-limit // 2 :]}"


def task_label(task_cls: type[Task], split: str | None) -> str:
    """How a check's message names the task: ``task 'db' (split 'dev')``."""
    return f"task {task_cls.name!r}" + (f" (split {split!r})" if split else "")


def installed(task_cls: type[Task]) -> bool:
    """Whether ``task_cls`` is the task installed under its name (entry-point group ``agentrl_envs.tasks``)."""
    from ..registry import get_task

    try:
        return get_task(task_cls.name) is task_cls
    except Exception:
        return False
