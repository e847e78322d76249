"""Recorded model outputs played through our task and through BFCL's own harness: same verdicts.

For entries of every supported category, scripts of assistant messages (right calls, wrong
values, a wrong argument name, malformed JSON arguments, an early stop, a call of a function the
model does not have, a held-back function called before its turn, all calls at once, a turn run
past BFCL's step limit) are answered by ``bfcl`` (in-process, through the SDK's agent loop) and by
BFCL's ``OpenAICompletionsHandler`` whose model call returns the same script (BFCL's runner, then
its eval runner's per-entry evaluator). Both must ask for the same messages (the tools offered
and the newest user message at each request) and reach the same verdict, and across the scripts
both verdicts occur.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from agentrl_env_bfcl.categories import MULTI_TURN, SINGLE_TURN
from agentrl_env_bfcl.reference import END_OF_TURN, calls_message, reference_messages, text_message
from bfcl_harness import play_bfcl, play_ours, runtime

ENTRIES_PER_CATEGORY = 4


def _calls(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]


def _first_calls(script: list[dict[str, Any]]) -> int:
    return next(i for i, m in enumerate(script) if m.get("tool_calls"))


def _wrong_value(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    script = copy.deepcopy(script)
    i = _first_calls(script)
    calls = _calls(script[i])
    name, args = calls[0]
    key = next(iter(args), None)
    if key is not None:
        value = args[key]
        args[key] = value + 7 if isinstance(value, int | float) and not isinstance(value, bool) else f"{value}_wrong"
    script[i] = calls_message([(name, args), *calls[1:]])
    return script


def _wrong_argument_name(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    script = copy.deepcopy(script)
    i = _first_calls(script)
    calls = _calls(script[i])
    name, args = calls[0]
    script[i] = calls_message([(name, {**args, "no_such_argument": 1}), *calls[1:]])
    return script


def _malformed(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    script = copy.deepcopy(script)
    i = _first_calls(script)
    broken = copy.deepcopy(script[i])
    broken["tool_calls"][0]["function"]["arguments"] = '{"oops": '
    return [*script[:i], broken, *script[i:]]


def _early_stop(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return script[: script.index(next(m for m in script if m.get("content") == END_OF_TURN)) + 1]


def _unknown_function(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [calls_message([("launch_rocket", {"target": "moon"})]), *script]


def _all_at_once(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = [c for m in script for c in _calls(m)]
    return [calls_message(calls), text_message()]


def _past_step_limit(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    name, args = _calls(script[_first_calls(script)])[0]
    return [calls_message([(name, args)]) for _ in range(21)] + script


def _held_back_too_early(sample: dict[str, Any], script: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """miss_func: call the held-back function in the first turn, before the turn that adds it."""
    held = sample["entry"].get("missed_function") or {}
    if not held:
        return None
    turn = int(next(iter(held)))
    names = {f["name"] for f in held[str(turn)]}
    from agentrl_env_bfcl.reference import _methods, parse_call

    methods = _methods(sample["entry"]["involved_classes"])
    calls = [parse_call(c, methods) for c in sample["ground_truth"][turn]]
    early = [c for c in calls if c[0] in names] or calls[:1]
    return [calls_message(early), *script]


MULTI_TURN_SCRIPTS = {
    "right": lambda s, r: r,
    "wrong value": lambda s, r: _wrong_value(r),
    "wrong argument name": lambda s, r: _wrong_argument_name(r),
    "malformed JSON": lambda s, r: _malformed(r),
    "early stop": lambda s, r: _early_stop(r),
    "unknown function": lambda s, r: _unknown_function(r),
    "held-back function too early": _held_back_too_early,
    "all calls at once": lambda s, r: _all_at_once(r),
    "past the step limit": lambda s, r: _past_step_limit(r),
}

SINGLE_TURN_SCRIPTS = {
    "right": lambda r: r,
    "wrong value": lambda r: _wrong_value(r) if r[0].get("tool_calls") else r,
    "malformed JSON": lambda r: _malformed(r)[:1] if r[0].get("tool_calls") else [calls_message([("f", {})])],
    "text": lambda r: [text_message("I cannot do that.")],
    "one call twice": lambda r: [calls_message(_calls(r[0]) * 2)] if r[0].get("tool_calls") else [calls_message([("x", {})])],
}


def _compare(split: str, scripts: dict[str, Any], build: Any) -> Counter:
    rt = runtime(split)
    verdicts: Counter = Counter()
    for index in range(ENTRIES_PER_CATEGORY):
        sample = rt.samples[index]
        reference = reference_messages(sample)
        for what, make in scripts.items():
            script = build(make, sample, reference)
            if script is None:
                continue
            where = f"{split} #{index} ({what})"
            transcript, ours_asked = _run(play_ours(rt, index, script))
            assert transcript.outcome is not None and transcript.outcome.scored, f"{where}: {transcript.error}"
            theirs, theirs_asked = play_bfcl(sample, script)
            assert ours_asked == theirs_asked, f"{where}: the runners asked differently"
            assert (transcript.reward == 1.0) == theirs, (
                f"{where}: ours {transcript.reward}, BFCL's valid={theirs} ({transcript.metrics})"
            )
            verdicts[theirs] += 1
    return verdicts


def _run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


@pytest.mark.parametrize("split", MULTI_TURN)
def test_multi_turn_verdicts_match_bfcl(split):
    verdicts = _compare(split, MULTI_TURN_SCRIPTS, lambda make, s, r: make(s, r))
    assert verdicts[True] and verdicts[False], verdicts


@pytest.mark.parametrize("split", SINGLE_TURN)
def test_single_turn_verdicts_match_bfcl(split):
    verdicts = _compare(split, SINGLE_TURN_SCRIPTS, lambda make, s, r: make(r))
    assert verdicts[True] and verdicts[False], verdicts
