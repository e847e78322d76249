"""The wire-level checks: what AgentRL's protocol promises, seen from a client of the controller
and, for the worker's own rules, from the controller's seat.

Each check is ``check(target, options) -> notes``: it raises :class:`AssertionError` saying what
was expected and what came, :class:`~agentrl_envs.conformance.common.ConformanceSkip` (with the reason)
when it cannot apply, and returns *notes*: what it reports without failing (advice included).
The rules are listed in ``docs/conformance.md``. They hold a worker to the protocol, not to how
agentrl-envs' own workers do things: a worker written the way AgentRL's examples write one passes
every check that applies to it. :data:`PROTOCOL_CHECKS` are about the worker's sessions and
capacity; the others about how its task answers a model.

This module holds the worker-level checks (``health``, ``tool_schemas``, ``capacity``) and the
list of them all; :mod:`.rounds`, :mod:`.lifecycle` and :mod:`.references` the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ...protocol.agentrl import SampleStatus
from ..common import ConformanceSkip, shorten
from ..tools import tool_list_problems
from .lifecycle import check_cancel, check_ended_session, check_idle_expiry
from .options import WireOptions
from .references import check_reference_replay
from .rounds import check_bad_calls, check_turn_limit
from .target import WireTarget

# --------------------------------------------------------------------------- health


def check_health(t: WireTarget, o: WireOptions) -> list[str]:
    """The controller lists a live worker of the task; each answers ``worker_status`` (its
    heartbeat's concurrency), ``get_sessions`` and ``get_indices`` (the controller's indices);
    ``GET /health`` answers 200 (a note where not; an image under test must have a HEALTHCHECK
    that reports healthy)."""
    notes: list[str] = []
    workers = t.live_workers()
    assert workers, f"{t.who}: expected a live worker of the task in GET /api/list_workers, got none"
    indices = t.indices()
    for w in workers:
        where = f"{t.who}, worker {w.address}"
        concurrency, current = t.worker_status(w)
        assert concurrency == w.concurrency, (
            f"{where}: expected worker_status's concurrency to be its heartbeat's ({w.concurrency}), got {concurrency}"
        )
        assert current <= concurrency, f"{where}: expected worker_status's current <= concurrency {concurrency}, got {current}"
        t.held(w)
        a = t.on_worker(w, "GET", "get_indices")
        assert a.ok and a.body == indices, (
            f"{where}: expected GET get_indices to answer the controller's {shorten(indices, 120)}, got {a.what()}"
        )
        a = t.on_worker(w, "GET", "/health")
        if a.status != 200:
            notes.append(
                f"worker {w.address}: GET {w.root}/health answers {a.status}, not 200 (a container image needs it for its HEALTHCHECK)"
            )
    if t.container_health is not None:
        status = t.container_health()
        assert status is not None, f"{t.who}: expected the image to declare a HEALTHCHECK (on /health), got none"
        assert status == "healthy", f"{t.who}: expected the container's HEALTHCHECK to report 'healthy', got {status!r}"
    return notes


# --------------------------------------------------------------------------- tool schemas


def check_tool_schemas(t: WireTarget, o: WireOptions) -> list[str]:
    """A start answers the opening messages, status ``running`` and the tools, and the session id
    in the ``session_id`` header. Each tool must be an OpenAI function tool (a name of
    ``[a-zA-Z0-9_-]{1,64}``, unique) whose ``parameters``, if any, is an object schema valid under
    JSON Schema Draft 2020-12; a missing description (of a tool or an argument) is advice: a note.
    A worker that advertises no tools (a text-only task): skipped."""
    index = t.first_index()
    with t.session(index) as (_, first):
        where = f"{t.who}, sample {index!r}"
        messages, tools = first.get("messages"), first.get("tools")
        assert isinstance(messages, list) and messages and all(isinstance(m, dict) and m.get("role") for m in messages), (
            f"{where}: expected the opening messages (a non-empty list of chat messages), got {shorten(messages)}"
        )
        assert first.get("status") == SampleStatus.RUNNING.value, (
            f"{where}: expected status 'running', got {first.get('status')!r}"
        )
        if tools is None or tools == []:
            raise ConformanceSkip(f"{where}: the worker advertises no tools (a text-only task): the tool checks do not apply")
        assert isinstance(tools, list), f"{where}: expected the task's tools (a list) in the start's answer, got {tools!r}"
        problems = tool_list_problems(tools, where)
    errors = [message for kind, message in problems if kind == "error"]
    if errors:
        raise AssertionError(errors[0] + (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""))
    return [f"advice: {message}" for kind, message in problems if kind == "advice"]


# --------------------------------------------------------------------------- capacity


def check_capacity(t: WireTarget, o: WireOptions) -> list[str]:
    """A worker with all its ``concurrency`` sessions open answers a start with HTTP 406; so does
    the controller when no worker of the task has a free slot; the slots free again on cancel."""
    notes: list[str] = []
    workers = t.live_workers()
    assert workers, f"{t.who}: expected a live worker of the task, got none"
    w = workers[0]
    where = f"{t.who}, worker {w.address}"
    concurrency, current = t.worker_status(w)
    if concurrency - current > o.max_fill:
        raise ConformanceSkip(f"{where}: {concurrency - current} free slots, more than --max-fill {o.max_fill} to fill")
    index = t.first_index()
    started: list[int] = []
    try:
        for k in range(concurrency - current):
            started.append(t.private_id())
            a = t.start_on(w, index, started[-1])
            assert a.ok, (
                f"{where}: expected {concurrency - current} sessions to start ({current}/{concurrency} open), got at session {k + 1}: {a.what()}"
            )
        started.append(t.private_id())
        a = t.start_on(w, index, started[-1])
        assert a.status == 406, (
            f"{where}: expected HTTP 406 to a start on the full worker ({concurrency}/{concurrency} sessions), got {a.what()}"
        )
        started.pop()
        data = a.body.get("data") if isinstance(a.body, dict) else None
        if not (isinstance(data, dict) and "active_sessions" in data and "max_sessions" in data):
            notes.append("the 406 carries no data {active_sessions, max_sessions} (agentrl-envs' workers send them)")
        if len(workers) == 1:
            a = t.start(index)
            if a.ok and a.headers.get("session_id", "").isdigit():
                t.cancel(int(a.headers["session_id"]))
            assert a.status == 406, (
                f"{t.who}: expected the controller to answer HTTP 406 while its only worker is full, got {a.what()}"
            )
        else:
            notes.append(f"{len(workers)} workers serve the task: only {w.address} was filled, the controller's 406 not checked")
    finally:
        for sid in started:
            with contextlib.suppress(Exception):
                t.on_worker(w, "POST", "cancel", json={"session_id": sid})
    freed = t.wait(lambda: t.worker_status(w)[1] <= current, o.settle)
    assert freed, (
        f"{where}: expected the cancelled sessions to free their slots (current {current}), got worker_status {t.worker_status(w)}"
    )
    return notes


# --------------------------------------------------------------------------- all of them

#: The checks by name, cheapest first; each ``check(target, options) -> notes``.
CHECKS: dict[str, Callable[[WireTarget, WireOptions], list[str]]] = {
    "health": check_health,
    "tool_schemas": check_tool_schemas,
    "bad_calls": check_bad_calls,
    "turn_limit": check_turn_limit,
    "cancel": check_cancel,
    "ended_session": check_ended_session,
    "capacity": check_capacity,
    "idle_expiry": check_idle_expiry,
    "reference_replay": check_reference_replay,
}

#: The checks of the protocol's sessions and capacity; the others check how the task answers a
#: model (within what AgentRL's protocol allows) and replay its references.
PROTOCOL_CHECKS = ["health", "tool_schemas", "cancel", "ended_session", "capacity", "idle_expiry"]
