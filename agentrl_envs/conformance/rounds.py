"""The in-process round checks: ``bad_calls`` (model mistakes are answered and counted) and
``turn_limit`` (a session without tool calls ends at its round limit)."""

from __future__ import annotations

import asyncio
from typing import Any

from ..episode import TaskRuntime
from ..errors import SessionFinishedError
from ..protocol.agentrl import SampleStatus
from ..task import Task
from .common import LOWERED_LIMIT, MAX_PLAYED_TURNS, NO_CALL, ConformanceSkip, model_end_note, split_of, task_label
from .sessions import ended, episode_of, open_runtime, start
from .tools import first_session_tools, has_session_tools

_UNKNOWN_TOOL = "conformance_no_such_tool"


def _call_message(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


#: One bad-call case: (what, the assistant message, the role the answer must have, a text it must mention).
BadCall = tuple[str, dict[str, Any], str, str | None]


#: Arguments that ``json.loads`` does not reject with ``JSONDecodeError`` but a model can write
#: (one looping on a token): nesting past Python's recursion limit (``RecursionError``), an integer
#: past ``sys.get_int_max_str_digits()`` (4,300: ``ValueError``), a lone surrogate escape (decoded
#: into a string that UTF-8 and orjson cannot encode). A task that catches only ``JSONDecodeError``
#: (or ``ValueError``) around ``json.loads`` ends such an episode ``task error``.
HOSTILE_ARGUMENTS: tuple[tuple[str, str], ...] = (
    ("arguments nested too deeply", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("an integer of 5,000 digits", '{"x": ' + "1" * 5_000 + "}"),
    ("a lone surrogate escape in a string", '{"x": "\\udc80"}'),
)


def bad_call_cases(tools: list[dict[str, Any]]) -> tuple[list[BadCall], list[str]]:
    """The model mistakes the ``bad_calls`` check sends, for these tools, and notes on the cases
    that do not apply: an unknown tool, invalid JSON arguments, the :data:`HOSTILE_ARGUMENTS`, a
    missing required argument (if a tool has one) and a message without a tool call."""
    first = tools[0]["function"]["name"]
    with_required = next((t["function"] for t in tools if t["function"].get("parameters", {}).get("required")), None)
    notes: list[str] = []
    cases: list[BadCall] = [
        ("an unknown tool", _call_message("c_unknown", _UNKNOWN_TOOL, "{}"), "tool", _UNKNOWN_TOOL),
        ("invalid JSON arguments", _call_message("c_json", first, '{"oops": '), "tool", "JSON"),
    ]
    # what these test is that the episode goes on; how the answer words it is the task's (BFCL's
    # harness names the exception it caught)
    for i, (what, arguments) in enumerate(HOSTILE_ARGUMENTS):
        cases.append((what, _call_message(f"c_hostile{i}", first, arguments), "tool", None))
    if with_required is not None:
        arg = with_required["parameters"]["required"][0]
        cases.append(("a missing required argument", _call_message("c_missing", with_required["name"], "{}"), "tool", arg))
    else:
        notes.append("no tool has a required argument: the missing-argument case does not apply")
    cases.append(("a message without a tool call", dict(NO_CALL), "user", None))
    return cases, notes


def check_bad_calls(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """Model mistakes are answered with a tool/user message, the round counts, the episode goes
    on; or the round ends the episode with a status of :data:`~.common.MODEL_ENDS` (a note; BFCL's
    harness ends a user turn on calls it cannot decode, and its last turn the entry), and the next
    mistake plays on a new episode. Never an exception or ``task error``."""
    split = split_of(task_cls, split)
    return asyncio.run(_bad_calls(task_cls, split, config))


async def _bad_calls(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[str]:
    who = task_label(task_cls, split)
    tools = await first_session_tools(task_cls, split, config) if has_session_tools(task_cls) else task_cls.tool_definitions()
    assert tools, f"{who}: expected at least one tool"
    cases, notes = bad_call_cases(tools)

    async with open_runtime(task_cls, split, config) as runtime:
        assert runtime.indices, f"{who}: expected samples, got none"
        limit = task_cls.resolve_turn_limit(runtime.sample(0), runtime.config)
        max_turns = len(cases) + 1 if limit <= len(cases) else None
        done = 0
        while done < len(cases):
            episode = episode_of(runtime, 0, max_turns=max_turns)
            if episode.task.turn_limit <= len(cases):
                raise ConformanceSkip(f"{who}: the round limit {episode.task.turn_limit} is too short for {len(cases)} bad calls")
            try:
                await start(episode, who)
                errors_before = 0
                for turn, (what, message, role, mention) in enumerate(cases[done:], start=1):
                    done += 1
                    where = f"{who}, sample 0, round {turn} ({what})"
                    try:
                        out = await episode.step([message])
                    except Exception as e:
                        raise AssertionError(f"{where}: expected a {role} message back, got {type(e).__name__}: {e}") from e
                    if out.finish:
                        notes.append(model_end_note(what, out.status.value, ended(out), where, "episode"))
                        break
                    errors_before = _answered(out, message, role, mention, turn, errors_before, where)
            finally:
                await episode.close()
    return notes


def _answered(
    out: Any, message: dict[str, Any], role: str, mention: str | None, turn: int, errors_before: int, where: str
) -> int:
    """Check one answered bad call of an episode that goes on; the ``tool_errors`` count after it."""
    # One message back; a task that follows another harness's turn rules (BFCL ends a user turn
    # on an undecodable or text reply) may follow it with the next user turn.
    extra = out.messages[1:]
    assert out.messages and all(m.get("role") == "user" for m in extra), (
        f"{where}: expected one {role} message back (then at most user messages), got {out.messages!r}"
    )
    answer = out.messages[0]
    assert answer.get("role") == role, f"{where}: expected a {role} message back, got {answer!r}"
    content = answer.get("content")
    assert isinstance(content, str) and content.strip(), f"{where}: expected a readable text, got {content!r}"
    if role == "tool":
        call_id = message["tool_calls"][0]["id"]
        assert answer.get("tool_call_id") == call_id, (
            f"{where}: expected the answer to carry tool_call_id {call_id!r}, got {answer.get('tool_call_id')!r}"
        )
        errors = out.metric.get("tool_errors")
        assert errors == errors_before + 1, (
            f"{where}: expected the tool_errors metric to grow to {errors_before + 1}, got {errors}"
        )
        errors_before = errors
    if mention is not None:
        assert mention in content, f"{where}: expected the answer to mention {mention!r}, got {content!r}"
    assert out.metric.get("turns") == turn, (
        f"{where}: expected the round to count (turns = {turn}), got turns = {out.metric.get('turns')!r}"
    )
    return errors_before


# --------------------------------------------------------------------------- round limit


def check_turn_limit(task_cls: type[Task], split: str | None = None, *, config: dict[str, Any] | None = None) -> list[str]:
    """A session that never calls a tool ends ``task limit reached`` after exactly its round limit."""
    split = split_of(task_cls, split)
    return asyncio.run(_turn_limit(task_cls, split, config))


async def _turn_limit(task_cls: type[Task], split: str | None, config: dict[str, Any] | None) -> list[str]:
    who = task_label(task_cls, split)
    notes: list[str] = []
    base = TaskRuntime(task_cls, split=split, config=config)
    assert base.indices, f"{who}: expected samples, got none"
    natural = task_cls.resolve_turn_limit(base.sample(0), base.config)
    expected, options, sample_limit = natural, dict(config or {}), None
    if natural > MAX_PLAYED_TURNS:
        if "max_turns" in task_cls.Config.model_fields and options.get("max_turns") is None:
            options["max_turns"], how = LOWERED_LIMIT, f"the option max_turns={LOWERED_LIMIT}"
        else:
            sample_limit, how = LOWERED_LIMIT, f"a sample with max_turns {LOWERED_LIMIT}"
        expected = LOWERED_LIMIT
        notes.append(f"the round limit {natural} is too long to play: checked with {how}")

    async with open_runtime(task_cls, split, options) as runtime:
        episode = episode_of(runtime, 0, max_turns=sample_limit)
        if episode.task.turn_limit != expected:
            if natural > MAX_PLAYED_TURNS:
                raise ConformanceSkip(
                    f"{who}: its round limit {natural} is above {MAX_PLAYED_TURNS} and neither a max_turns option nor a"
                    f" sample's max_turns lowers it (got {episode.task.turn_limit})"
                )
            raise AssertionError(
                f"{who}: expected the session's turn_limit to be {expected} (Task.resolve_turn_limit), got {episode.task.turn_limit}"
            )
        try:
            await start(episode, who)
            for turn in range(1, expected + 1):
                where = f"{who}, sample 0, round {turn} of {expected} without a tool call"
                try:
                    out = await episode.step([dict(NO_CALL)])
                except Exception as e:
                    raise AssertionError(f"{where}: expected an answer, got {type(e).__name__}: {e}") from e
                assert [m.get("role") for m in out.messages] == ["user"], (
                    f"{where}: expected one user message back, got {out.messages!r}"
                )
                if turn < expected:
                    assert not out.finish, f"{where}: expected the episode to go on, got it ended ({ended(out)})"
                else:
                    assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0.0, (
                        f"{where}: expected the episode to end with status 'task limit reached', reward 0; got "
                        + (ended(out) if out.finish else "it still running")
                    )
                    assert out.metric.get("turns") == expected, (
                        f"{where}: expected metrics turns = {expected}, got {out.metric.get('turns')!r}"
                    )
            try:
                await episode.step([dict(NO_CALL)])
            except SessionFinishedError:
                pass
            else:
                raise AssertionError(f"{who}: expected a step after the limit to raise SessionFinishedError, it was accepted")
        finally:
            await episode.close()
    return notes
