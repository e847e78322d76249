"""The conformance suite: what every task must do, checked without task-specific test code.

Two kinds of checks, side by side in this package:

* **in-process**, on a task class (this module's :data:`CHECKS`): :mod:`.tools`, :mod:`.rounds`,
  :mod:`.teardown`, :mod:`.gym_env`, :mod:`.replay` (described below);
* **over the wire**, on any worker behind a controller, whatever its language
  (:mod:`.wire`, ``agentrl-envs conform``).

What both use (the skip, the message without a tool call, the default split) is :mod:`.common`.

Run the in-process checks on your own task, installed or not::

    from agentrl_envs.conformance import check_task_conformance
    check_task_conformance(MyTask)        # raises AssertionError listing every failed check

or one check per test, as the ``tests/test_NAME.py`` written by ``agentrl-envs new NAME`` does::

    @pytest.mark.parametrize("check", CHECKS)
    def test_conformance(check):
        try:
            CHECKS[check](MyTask)
        except ConformanceSkip as e:
            pytest.skip(str(e))

Every check takes the task class, a split (default: ``"dev"`` if the task has it, else its first)
and ``config`` (the task's options, as ``--option``). It raises :class:`AssertionError` saying
what was expected and what came, :class:`ConformanceSkip` (with the reason) when it cannot apply,
and returns *notes*: what it reports without failing.

``tool_schemas``
    ``tool_definitions()`` is a non-empty list of OpenAI function tools (``type: function``, a
    name of ``[a-zA-Z0-9_-]{1,64}``, unique, a description, every parameter described) whose
    ``parameters`` is an object schema valid under JSON Schema Draft 2020-12 (needs
    ``jsonschema``: ``pip install 'agentrl-envs[test]'``).
``bad_calls``
    An unknown tool, invalid JSON arguments, arguments ``json.loads`` fails on with other errors
    (nested too deeply, an integer of 5,000 digits; and a lone surrogate escape: see
    :data:`~.rounds.HOSTILE_ARGUMENTS`), a missing required argument and a message without a tool
    call each come back as a tool (or user) message, not an exception, and each counts as a
    round; a round that ends the episode instead must end it with a status that puts the mistake
    on the model (a note; the next mistake plays on a new episode), never ``task error``.
``turn_limit``
    A session whose every message calls no tool ends ``task limit reached`` (reward 0) after
    exactly its round limit. A limit above :data:`MAX_PLAYED_TURNS` (echo's is 1,000,000) is
    lowered to 3 the documented way (:meth:`Task.resolve_turn_limit`): the ``max_turns`` option
    if the task's ``Config`` has one, else a sample's ``max_turns``; a task that takes neither is
    skipped with the reason.
``teardown``
    On a worker service (:class:`~agentrl_envs.worker.WorkerService`, no HTTP): a session that the
    task ends, one the client cancels and one still running when the worker shuts down each run
    ``teardown`` exactly once (the class's ``setup``/``teardown`` are wrapped to count), the
    worker holds no session afterwards and :meth:`TaskRuntime.close` works (twice).
``gym_env``
    gymnasium's ``check_env`` on ``agentrl_envs.make(task, split=...)``.
``reference_replay``
    Every sample of the split that has a reference (:meth:`Task.reference_policy`) is replayed by
    :func:`agentrl_envs.check.check_task` through a real controller and worker over HTTP and must
    end ``completed`` with reward 1; afterwards neither holds a session of the task. For a task
    installed under its name (entry-point group ``agentrl_envs.tasks``) they are a
    :class:`~agentrl_envs.stack.LocalStack` (separate processes, as ``agentrl-envs check``); for a
    class that is not installed (a package being written), the same controller and worker
    services in threads of this process. ``reference_policy`` returning ``None`` is how a task
    says a sample has no known solution: such samples are reported (a note), not failed, unless
    ``require_all_references=True``; but the task must define ``reference_policy`` and at least
    one sample of the split must have a reference.

The checks are synchronous (each runs its own event loop); call them from plain code or sync tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..task import Task
from .common import MAX_PLAYED_TURNS, NO_CALL, ConformanceSkip, default_split, shorten
from .gym_env import check_gym_env, temporarily_registered
from .replay import check_reference_replay
from .rounds import BadCall, bad_call_cases, check_bad_calls, check_turn_limit
from .teardown import check_teardown
from .tools import check_tool_list, check_tool_schemas, has_session_tools, tool_list_problems

__all__ = [
    "CHECKS",
    "MAX_PLAYED_TURNS",
    "NO_CALL",
    "BadCall",
    "ConformanceSkip",
    "bad_call_cases",
    "check_bad_calls",
    "check_gym_env",
    "check_reference_replay",
    "check_task_conformance",
    "check_teardown",
    "check_tool_list",
    "check_tool_schemas",
    "check_turn_limit",
    "default_split",
    "has_session_tools",
    "shorten",
    "temporarily_registered",
    "tool_list_problems",
]


#: The checks by name, cheapest first; each ``check(task_cls, split=None, *, config=None) -> notes``.
CHECKS: dict[str, Callable[..., list[str]]] = {
    "tool_schemas": check_tool_schemas,
    "bad_calls": check_bad_calls,
    "turn_limit": check_turn_limit,
    "teardown": check_teardown,
    "gym_env": check_gym_env,
    "reference_replay": check_reference_replay,
}


def check_task_conformance(
    task_cls: type[Task],
    split: str | None = None,
    *,
    config: dict[str, Any] | None = None,
    checks: list[str] | None = None,
) -> dict[str, list[str]]:
    """Run ``checks`` (default: all of :data:`CHECKS`); return each one's notes (a skipped check:
    ``["skipped: why"]``). Raises one :class:`AssertionError` naming every check that failed."""
    results: dict[str, list[str]] = {}
    failures: list[str] = []
    for name in checks or list(CHECKS):
        try:
            results[name] = CHECKS[name](task_cls, split, config=config)
        except ConformanceSkip as e:
            results[name] = [f"skipped: {e}"]
        except AssertionError as e:
            failures.append(f"[{name}] {e}")
    if failures:
        raise AssertionError(f"task {task_cls.name!r} fails {len(failures)} conformance checks:\n" + "\n".join(failures))
    return results
