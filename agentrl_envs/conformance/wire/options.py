"""What the wire cannot tell the checks: :class:`WireOptions` (the command line is generated from it)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class WireOptions:
    """Options of the wire-level checks. Every field has a default that works on a controller
    started for the check (``conform --image``, the tests); ``idle_timeout`` must be given for
    any other, or the idle-expiry check is skipped.

    Timing:
        idle_timeout, worker_idle_timeout, settle
    The task:
        turn_limit, max_rounds, max_fill, split, limit
    """

    idle_timeout: float | None = field(
        default=None, metadata={"help": "the controller's idle timeout in s (unset: idle_expiry is skipped; --image: 4)"}
    )
    worker_idle_timeout: float | None = field(
        default=None,
        metadata={"help": "the worker's own idle timeout in s, if it has one: a session started on it directly must go"},
    )
    settle: float = field(default=10.0, metadata={"help": "seconds a cancel or an expiry may take to reach the worker"})
    turn_limit: int | None = field(
        default=None,
        metadata={"help": "the task's round limit, if known: the turn-limit check then expects exactly that many rounds"},
    )
    max_rounds: int = field(
        default=40,
        metadata={
            "help": "without --turn-limit: rounds the turn-limit and ended-session checks play before they give up (skipped)"
        },
    )
    max_fill: int = field(
        default=64, metadata={"help": "sessions the capacity check opens at most (a worker with more free slots: skipped)"}
    )
    split: str | None = field(
        default=None,
        metadata={
            "help": "the split of a task installed here whose reference_policy replays on the worker's samples (default: its first)"
        },
    )
    limit: int | None = field(
        default=None, metadata={"help": "replay at most this many references a worker offers (default: all)"}
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and value <= 0:
                raise ValueError(f"{f.name} must be positive, got {value} (leave it unset for the default)")
