"""The checks of how a task answers rounds: ``bad_calls`` and ``turn_limit``.

What they hold a worker to is what AgentRL's protocol and OpenAI's chat format promise: a
model's mistake is never the worker's error (no HTTP error, no ``task error``); a round either
goes on (status ``running``; a tool call answered by a tool message with its ``tool_call_id``,
as a chat must be before the model's next turn) or ends the episode with a status that puts the
outcome on the model (:data:`~agentrl_envs.conformance.common.MODEL_ENDS`). How an answer is worded (naming the unknown
tool, saying ``JSON``) is advice: a note, not a failure.
"""

from __future__ import annotations

from typing import Any

from ...protocol.agentrl import SampleStatus
from ..common import ConformanceSkip, model_end_note, shorten
from ..rounds import bad_call_cases
from .moves import NO_CALL_MOVE, Move, ended, env_out, keep_open
from .options import WireOptions
from .target import WireTarget

_LIMIT = SampleStatus.TASK_LIMIT_REACHED.value
#: Ends that are the task's verdict on the move played, not its round limit.
_VERDICTS = (SampleStatus.AGENT_VALIDATION_FAILED.value, SampleStatus.AGENT_INVALID_ACTION.value)


def _verdict(body: dict[str, Any]) -> bool:
    """The task ended the episode as its verdict on the moves: a verdict status, or ``completed``
    with reward 0 (BFCL judges an entry after its last user turn; a round limit reported as
    ``completed`` with a reward is not a verdict on moves that do nothing)."""
    if body["status"] in _VERDICTS:
        return True
    return body["status"] == SampleStatus.COMPLETED.value and not body.get("reward")


def _metrics(body: dict[str, Any]) -> dict[str, Any]:
    return body["metrics"] if isinstance(body.get("metrics"), dict) else {}


def goes_on(body: dict[str, Any], message: dict[str, Any], where: str) -> dict[str, Any] | None:
    """Check an answer whose episode goes on: status ``running``, and a tool call answered by a
    tool message with its id. The answering message (None for a round without a call that got none)."""
    assert body["status"] == SampleStatus.RUNNING.value, (
        f"{where}: expected status 'running' while the episode goes on (finish false), got {body['status']!r}"
    )
    out = body["messages"]
    calls = message.get("tool_calls") or []
    if not calls:
        return out[-1] if out and isinstance(out[-1], dict) else None
    call_id = calls[0]["id"]
    answers = [m for m in out if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") == call_id]
    assert answers, (
        f"{where}: expected a tool message answering call {call_id!r} (a chat answers every tool call before the"
        f" model's next turn), got {shorten(out)}"
    )
    return answers[0]


# --------------------------------------------------------------------------- bad calls


def check_bad_calls(t: WireTarget, o: WireOptions) -> list[str]:
    """Model mistakes (an unknown tool, invalid JSON arguments, the hostile arguments of
    :data:`~agentrl_envs.conformance.rounds.HOSTILE_ARGUMENTS`, a missing required argument, no
    tool call) are each a round that goes on (see :func:`goes_on`) or ends the episode with a
    status of :data:`~agentrl_envs.conformance.common.MODEL_ENDS`, never an HTTP error or ``task error``; where the worker
    reports them, ``metrics.turns`` counts the round and ``metrics.tool_errors`` grows. After a
    round that ended the episode (a note) the next mistake plays on a fresh session. Notes
    (advice): an answer with no readable text, or one that does not say what was wrong."""
    index = t.first_index()
    notes: list[str] = []
    cases: list[Any] | None = None
    done = 0
    while cases is None or done < len(cases):
        with t.session(index) as (sid, first):
            if cases is None:
                tools = first.get("tools") or []
                if not tools:
                    raise ConformanceSkip(f"{t.who}: the worker advertises no tools: the bad calls do not apply")
                cases, more = bad_call_cases(tools)
                notes += more
            errors = _metrics(first).get("tool_errors")
            for turn, (what, message, role, mention) in enumerate(cases[done:], start=1):
                done += 1
                where = f"{t.who}, sample {index!r}, round {turn} ({what})"
                body = env_out(t.interact(sid, message), where)
                if body["finish"]:
                    notes.append(model_end_note(what, body["status"], ended(body), where, "session"))
                    break
                answer = goes_on(body, message, where)
                metrics = _metrics(body)
                if role == "tool" and "tool_errors" in metrics:
                    expected = (errors if errors is not None else metrics["tool_errors"] - 1) + 1
                    assert metrics["tool_errors"] == expected, (
                        f"{where}: expected the tool_errors metric to grow to {expected}, got {metrics['tool_errors']}"
                    )
                    errors = metrics["tool_errors"]
                if "turns" in metrics:
                    assert metrics["turns"] == turn, (
                        f"{where}: expected the round to count (turns = {turn}), got turns = {metrics['turns']!r}"
                    )
                elif turn == 1 and done == 1:
                    notes.append("the answers carry no `turns` metric: that each bad call counts as a round is not checked")
                content = answer.get("content") if answer is not None else None
                if not (isinstance(content, str) and content.strip()):
                    notes.append(f"{what}: answered with no readable text ({shorten(body['messages'], 120)}): say what was wrong")
                elif mention is not None and mention not in content:
                    notes.append(f"{what}: the answer does not mention {mention!r} ({shorten(content, 120)})")
    return notes


# --------------------------------------------------------------------------- round limit


def check_turn_limit(t: WireTarget, o: WireOptions) -> list[str]:
    """Rounds of the first move that keeps a session open (:func:`~.moves.keep_open`: a round
    without a tool call where that keeps it open, else a call of an advertised tool) end the
    episode ``task limit reached`` with reward 0 after the task's round limit (exactly
    ``turn_limit`` if given); each round before goes on (:func:`goes_on`); a step after the end
    is refused (4xx). No end within ``max_rounds``, or an end that is the task's verdict on the
    move (``agent validation failed``, ``agent invalid action``, ``completed`` with reward 0):
    skipped, saying so."""
    found = keep_open(t)
    if found.move is None:
        raise ConformanceSkip(f"{t.who}: {found.why_none()}: there is no round limit to reach")
    move: Move = found.move
    notes = [] if move is NO_CALL_MOVE else [f"played {move.what}: a round without a tool call ends the episode"]
    index = t.first_index()
    cap = o.turn_limit or o.max_rounds
    with t.session(index) as (sid, _):
        for turn in range(1, cap + 1):
            where = f"{t.who}, sample {index!r}, round {turn} {move.what}"
            message = move.message(turn)
            body = env_out(t.interact(sid, message), where)
            if body["finish"]:
                break
            if goes_on(body, message, where) is None and move is NO_CALL_MOVE and turn == 1:
                notes.append("a round without a tool call is answered with no message: the model is told nothing")
        else:
            if o.turn_limit is not None:
                raise AssertionError(
                    f"{t.who}, sample {index!r}: expected the episode to end 'task limit reached' at round {o.turn_limit}, got it still running"
                )
            raise ConformanceSkip(
                f"{t.who}: no end within {cap} rounds {move.what} (a round limit above what the check plays:"
                " pass --turn-limit N, or --max-rounds N to play more)"
            )
        if _verdict(body) and (o.turn_limit is None or turn < o.turn_limit):
            raise ConformanceSkip(
                f"{where}: the task ended the episode ({ended(body)}), its verdict on the move rather than a round limit:"
                " the limit cannot be reached with the moves this check plays"
            )
        if o.turn_limit is not None:
            assert turn == o.turn_limit, (
                f"{where}: expected the episode to end at round {o.turn_limit} (the round limit), got it ended here"
            )
        assert body["status"] == _LIMIT and body.get("reward") == 0, (
            f"{where}: expected the episode to end with status 'task limit reached', reward 0; got {ended(body)}"
        )
        metrics = _metrics(body)
        if "turns" in metrics:
            assert metrics["turns"] == turn, f"{where}: expected metrics turns = {turn}, got {metrics['turns']!r}"
        a = t.interact(sid, move.message(turn + 1))
        assert 400 <= a.status < 500, f"{t.who}: expected a step after the end to be refused (HTTP 4xx), got {a.what()}"
    return [*notes, f"round limit: {turn}"]
