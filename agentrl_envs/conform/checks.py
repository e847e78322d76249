"""The wire-level checks: the in-process suite's rules (:mod:`agentrl_envs.conformance`), seen
from a client of the controller and, for the worker's own rules, from the controller's seat.

Each check is ``check(target, options) -> notes``: it raises :class:`AssertionError` saying what
was expected and what came, :class:`~agentrl_envs.conformance.ConformanceSkip` (with the reason)
when it cannot apply, and returns *notes*: what it reports without failing. The rules are listed
in ``docs/conformance.md``; :data:`PROTOCOL_CHECKS` are those every worker of the protocol must
pass (AgentRL's own ``agentrl-worker`` tasks included), the others are about how a task answers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .. import conformance as in_process
from ..conformance import NO_CALL, ConformanceSkip, bad_call_cases, check_tool_list, shorten
from ..schema import SampleStatus
from .options import WireOptions
from .wire import Answer, WireTarget, Worker

_ENDED = SampleStatus.TASK_LIMIT_REACHED.value


def _first_index(t: WireTarget) -> Any:
    return t.indices()[0]


def _env_out(a: Answer, where: str, role: str | None = None) -> dict[str, Any]:
    """The body of a step's answer, which must be 200 with ``finish``, ``status``, ``messages``."""
    body = a.body if isinstance(a.body, dict) else {}
    assert a.ok and isinstance(body.get("messages"), list) and "finish" in body and "status" in body, (
        f"{where}: expected {'a ' + role + ' message back' if role else 'an answer'}"
        f" ({{finish, reward, status, messages, metrics}}), got {a.what()}"
    )
    return body


def _ended(body: dict[str, Any]) -> str:
    why = body.get("metrics", {}).get("error") if isinstance(body.get("metrics"), dict) else None
    return f"status {body.get('status')!r}, reward {body.get('reward')}" + (f", error: {shorten(why)}" if why else "")


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
    """A start answers the opening messages and the tools, each an OpenAI function tool with a
    valid JSON Schema (the in-process rules), and the session id in the ``session_id`` header."""
    index = _first_index(t)
    with t.session(index) as (_, first):
        where = f"{t.who}, sample {index!r}"
        messages, tools = first.get("messages"), first.get("tools")
        assert isinstance(messages, list) and messages and all(isinstance(m, dict) and m.get("role") for m in messages), (
            f"{where}: expected the opening messages (a non-empty list of chat messages), got {shorten(messages)}"
        )
        assert first.get("status") == SampleStatus.RUNNING.value, (
            f"{where}: expected status 'running', got {first.get('status')!r}"
        )
        assert isinstance(tools, list) and tools, f"{where}: expected the task's tools in the start's answer, got {tools!r}"
        check_tool_list(tools, where)
    return []


# --------------------------------------------------------------------------- bad calls


def check_bad_calls(t: WireTarget, o: WireOptions) -> list[str]:
    """Model mistakes (an unknown tool, invalid JSON, a missing required argument, no tool call)
    are each answered with one tool (or user) message; the episode goes on; each is a round."""
    index = _first_index(t)
    with t.session(index) as (sid, first):
        cases, notes = bad_call_cases(first.get("tools") or [])
        errors = first.get("metrics", {}).get("tool_errors") if isinstance(first.get("metrics"), dict) else None
        for turn, (what, message, role, mention) in enumerate(cases, start=1):
            where = f"{t.who}, sample {index!r}, round {turn} ({what})"
            body = _env_out(t.interact(sid, message), where, role)
            if body["finish"] and body["status"] == _ENDED:
                raise ConformanceSkip(f"{t.who}: the round limit {turn} is too short for {len(cases)} bad calls")
            assert not body["finish"], f"{where}: expected the episode to go on, got it ended ({_ended(body)})"
            out = body["messages"]
            assert len(out) == 1, f"{where}: expected exactly one {role} message back, got {shorten(out)}"
            answer = out[0]
            assert isinstance(answer, dict) and answer.get("role") == role, (
                f"{where}: expected a {role} message back, got {answer!r}"
            )
            content = answer.get("content")
            assert isinstance(content, str) and content.strip(), f"{where}: expected a readable text, got {content!r}"
            metrics = body.get("metrics") if isinstance(body.get("metrics"), dict) else {}
            if role == "tool":
                call_id = message["tool_calls"][0]["id"]
                assert answer.get("tool_call_id") == call_id, (
                    f"{where}: expected the answer to carry tool_call_id {call_id!r}, got {answer.get('tool_call_id')!r}"
                )
                if "tool_errors" in metrics:
                    expected = (errors if errors is not None else metrics["tool_errors"] - 1) + 1
                    assert metrics["tool_errors"] == expected, (
                        f"{where}: expected the tool_errors metric to grow to {expected}, got {metrics['tool_errors']}"
                    )
                    errors = metrics["tool_errors"]
            if mention is not None:
                assert mention in content, f"{where}: expected the answer to mention {mention!r}, got {content!r}"
            if "turns" in metrics:
                assert metrics["turns"] == turn, (
                    f"{where}: expected the round to count (turns = {turn}), got turns = {metrics['turns']!r}"
                )
            elif turn == 1:
                notes.append("the answers carry no `turns` metric: that each bad call counts as a round is not checked")
    return notes


# --------------------------------------------------------------------------- round limit


def check_turn_limit(t: WireTarget, o: WireOptions) -> list[str]:
    """A session whose every message calls no tool gets one user message a round and ends
    ``task limit reached`` with reward 0 after its round limit (``turn_limit`` if given); a step
    after the end is refused (4xx)."""
    index = _first_index(t)
    cap = o.turn_limit or o.max_rounds
    with t.session(index) as (sid, _):
        for turn in range(1, cap + 1):
            where = f"{t.who}, sample {index!r}, round {turn} without a tool call"
            body = _env_out(t.interact(sid, dict(NO_CALL)), where, "user")
            roles = [m.get("role") if isinstance(m, dict) else m for m in body["messages"]]
            assert roles == ["user"], f"{where}: expected one user message back, got {shorten(body['messages'])}"
            if body["finish"]:
                break
        else:
            if o.turn_limit is not None:
                raise AssertionError(
                    f"{t.who}, sample {index!r}: expected the episode to end 'task limit reached' at round {o.turn_limit}, got it still running"
                )
            raise ConformanceSkip(
                f"{t.who}: no end within {cap} rounds without a tool call (a round limit above what the check plays:"
                " pass --turn-limit N, or --max-rounds N to play more)"
            )
        if o.turn_limit is not None:
            assert turn == o.turn_limit, (
                f"{where}: expected the episode to end at round {o.turn_limit} (the round limit), got it ended here"
            )
        assert body["status"] == _ENDED and body.get("reward") == 0, (
            f"{where}: expected the episode to end with status 'task limit reached', reward 0; got {_ended(body)}"
        )
        metrics = body.get("metrics") if isinstance(body.get("metrics"), dict) else {}
        if "turns" in metrics:
            assert metrics["turns"] == turn, f"{where}: expected metrics turns = {turn}, got {metrics['turns']!r}"
        a = t.interact(sid, dict(NO_CALL))
        assert 400 <= a.status < 500, f"{t.who}: expected a step after the end to be refused (HTTP 4xx), got {a.what()}"
    return [f"round limit: {turn}"]


# --------------------------------------------------------------------------- cancel


def _released(t: WireTarget, w: Worker, sid: int, what: str, seconds: float) -> None:
    """Neither the controller nor the worker holds session ``sid`` (within ``seconds``), and both
    refuse a step of it."""
    if not t.wait(lambda: str(sid) not in t.held(w) and sid not in t.open_sessions(), seconds):
        where = "in the worker's get_sessions" if str(sid) in t.held(w) else "in the controller's list_sessions"
        raise AssertionError(
            f"{t.who}: expected worker {w.address} and the controller to release session {sid} {what} within {seconds:g} s,"
            f" got it still {where}"
        )
    a = t.on_worker(w, "POST", "interact", json={"session_id": sid, "messages": [dict(NO_CALL)]})
    assert 400 <= a.status < 500, (
        f"{t.who}: expected worker {w.address} to refuse a step of session {sid} {what} (HTTP 4xx), got {a.what()}"
    )
    a = t.interact(sid, dict(NO_CALL))
    assert 400 <= a.status < 500, (
        f"{t.who}: expected the controller to refuse a step of session {sid} {what} (HTTP 4xx), got {a.what()}"
    )


def check_cancel(t: WireTarget, o: WireOptions) -> list[str]:
    """A session cancelled through the controller is released by its worker: gone from its
    ``get_sessions``, ``worker_status`` counting one less, a step of it refused (4xx)."""
    index = _first_index(t)
    with t.session(index) as (sid, _):
        _env_out(t.interact(sid, dict(NO_CALL)), f"{t.who}, sample {index!r}, round 1")
        w = t.worker_of(sid)
        assert str(sid) in t.held(w), (
            f"{t.who}: expected worker {w.address} to list session {sid} in get_sessions, got {t.held(w)}"
        )
        _, before = t.worker_status(w)
        a = t.cancel(sid)
        assert a.ok, f"{t.who}: expected the cancel of session {sid} to be accepted, got {a.what()}"
        _released(t, w, sid, "after it was cancelled", o.settle)
        _, after = t.worker_status(w)
    if after < before:
        return []
    return [f"worker_status counted {before} sessions before the cancel and {after} after (other clients starting sessions?)"]


# --------------------------------------------------------------------------- idle expiry


def check_idle_expiry(t: WireTarget, o: WireOptions) -> list[str]:
    """A session left idle is dropped: by the controller after its idle timeout (the worker then
    releases it), and by the worker itself after its own (``worker_idle_timeout``), if given."""
    if o.idle_timeout is None and o.worker_idle_timeout is None:
        raise ConformanceSkip(
            f"{t.who}: the controller's idle timeout is not known (pass --idle-timeout S, or --worker-idle-timeout S"
            " for the worker's own)"
        )
    notes = []
    index = _first_index(t)
    if o.idle_timeout is not None:
        with t.session(index) as (sid, _):
            w = t.worker_of(sid)
            _released(t, w, sid, f"left idle for the controller's idle timeout ({o.idle_timeout:g} s)", o.idle_timeout + o.settle)
        notes.append(f"released after the controller's idle timeout ({o.idle_timeout:g} s)")
    if o.worker_idle_timeout is not None:
        w = t.live_workers()[0]
        sid = t.private_id()
        a = t.start_on(w, index, sid)
        assert a.ok, f"{t.who}: expected a session started on worker {w.address} directly to start, got {a.what()}"
        try:
            if not t.wait(lambda: str(sid) not in t.held(w), o.worker_idle_timeout + o.settle):
                raise AssertionError(
                    f"{t.who}: expected worker {w.address} to drop session {sid}, idle for its own idle timeout"
                    f" ({o.worker_idle_timeout:g} s), within {o.worker_idle_timeout + o.settle:g} s; got it still in get_sessions"
                )
        finally:
            t.on_worker(w, "POST", "cancel", json={"session_id": sid})
        notes.append(f"dropped by the worker after its own idle timeout ({o.worker_idle_timeout:g} s)")
    return notes


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
    index = _first_index(t)
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


# --------------------------------------------------------------------------- reference replay


def _installed_task(name: str) -> Any:
    from ..registry import get_task, task_names

    return get_task(name) if name in task_names() else None


def check_reference_replay(t: WireTarget, o: WireOptions) -> list[str]:
    """Every reference the worker offers (``GET {worker}/reference?index=I``: ``{index, messages}``,
    404 where none) is replayed through the controller and must end ``completed`` with reward 1.
    A task installed here under the same name replays its ``reference_policy`` instead (the
    in-process check, against this controller)."""
    cls = _installed_task(t.task)
    if cls is not None:
        return ["reference_policy of the task installed here"] + _in_process_replay(cls, t, o)
    w = t.live_workers()[0]
    indices = t.indices()[: o.limit] if o.limit else t.indices()
    references: dict[Any, list[dict[str, Any]]] = {}
    for index in indices:
        a = t.on_worker(w, "GET", "reference", params={"index": index})
        if a.status == 404:
            continue
        body = a.body if isinstance(a.body, dict) else {}
        assert a.ok and isinstance(body.get("messages"), list) and body["messages"], (
            f"{t.who}, worker {w.address}: expected GET reference?index={index} to answer {{index, messages: [assistant"
            f" message, ...]}} or 404, got {a.what()}"
        )
        references[index] = body["messages"]
    if not references:
        raise ConformanceSkip(f"{t.who}: the worker offers no reference (GET {w.address}/reference?index=I answers 404)")
    failed = [line for index, messages in references.items() if (line := _replay(t, index, messages))]
    if failed:
        raise AssertionError(
            f"{t.who}: expected every reference replay to end 'completed' with reward 1, got {len(failed)} of {len(references)}"
            " not solved:\n  " + "\n  ".join(failed[:10]) + (f"; and {len(failed) - 10} more" if len(failed) > 10 else "")
        )
    missing = len(indices) - len(references)
    return [f"{missing} of {len(indices)} samples have no reference (404)"] if missing else []


def _replay(t: WireTarget, index: Any, messages: list[dict[str, Any]]) -> str | None:
    """Play one reference; None if it solved the sample, else what happened (the check's line)."""
    with t.session(index) as (sid, _):
        body: dict[str, Any] = {}
        for turn, message in enumerate(messages, start=1):
            a = t.interact(sid, message)
            if not a.ok or not isinstance(a.body, dict):
                return f"sample {index}: turn {turn}: {a.what()}"
            body = a.body
            if body.get("finish"):
                break
        if body.get("finish") and body.get("status") == SampleStatus.COMPLETED.value and body.get("reward") == 1:
            return None
        state = _ended(body) if body.get("finish") else "still running"
        return f"sample {index}: {state} after {turn} of {len(messages)} reference turns"


def _in_process_replay(cls: Any, t: WireTarget, o: WireOptions) -> list[str]:
    # The split `agentrl-envs worker` serves by default, as `agentrl-envs check` assumes.
    split = o.split or (cls.splits[0] if cls.splits else None)
    return in_process.check_reference_replay(cls, split, controller_url=t.controller)


# --------------------------------------------------------------------------- all of them

#: The checks by name, cheapest first; each ``check(target, options) -> notes``.
CHECKS: dict[str, Callable[[WireTarget, WireOptions], list[str]]] = {
    "health": check_health,
    "tool_schemas": check_tool_schemas,
    "bad_calls": check_bad_calls,
    "turn_limit": check_turn_limit,
    "cancel": check_cancel,
    "capacity": check_capacity,
    "idle_expiry": check_idle_expiry,
    "reference_replay": check_reference_replay,
}

#: The checks of the protocol itself, which every worker must pass (AgentRL's own included);
#: the others check how the task answers (AgentBench-FC's rules).
PROTOCOL_CHECKS = ["health", "tool_schemas", "cancel", "capacity", "idle_expiry"]
