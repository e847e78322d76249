"""One multi-turn BFCL entry played as BFCL's runner plays it (``BaseHandler.inference_multi_turn_FC``).

The runner's rules, step by step:

* a user turn's messages are sent; the model answers (a *step*); BFCL records the answer as its
  OpenAI handler parses it (``[{name: arguments}, ...]`` or the text);
* if the answer decodes into calls, they run on the entry's class instances (BFCL's executor,
  one instance per class for the whole entry) and their results go back as tool messages; the
  turn goes on with the next step;
* if it does not decode (text, no call, invalid JSON arguments) or decodes to nothing, the turn
  ends: the next user turn's messages follow (after a tool message for each call that did not
  decode, which BFCL does not send but a chat API requires);
* ``miss_func``: the turn whose index holds back functions has no user message; BFCL adds the
  held-back function docs to the tools and sends its fixed user message instead
  (``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``);
* a turn that runs more than ``MAXIMUM_STEP_LIMIT`` (20) steps force-quits the entry;
* after the last turn (or a force quit) the recorded answers go to BFCL's per-entry evaluator,
  whose verdict (state and response checks against the ground truth's execution) is the reward.

What BFCL would evaluate with ``eval`` passes :mod:`.calls` first (see there).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from . import upstream
from .calls import for_checker, method_names, refusal


@dataclass
class Verdict:
    """BFCL's verdict on an entry: ``valid`` and, when not, its error type and message."""

    valid: bool
    error_type: str | None = None
    error: str | None = None
    force_quit: bool = False

    @classmethod
    def of(cls, result: dict[str, Any], *, force_quit: bool = False) -> Verdict:
        if result.get("valid"):
            return cls(True, force_quit=force_quit)
        error = result.get("error") or {}
        message = error.get("error_message") if isinstance(error, dict) else error
        if isinstance(message, list):
            message = " ".join(str(m) for m in message)
        kind = error.get("error_type") if isinstance(error, dict) else result.get("error_type")
        return cls(False, kind or result.get("error_type"), None if message is None else str(message)[:500], force_quit)


@dataclass
class MultiTurnRun:
    """The state of one entry's episode. Not thread-safe; BFCL's classes are run by the caller."""

    entry: dict[str, Any]
    ground_truth: list[list[str]]
    #: BFCL keys its class instances by model name and entry id: one fresh name per episode.
    model_name: str = field(default_factory=lambda: f"agentrl_{secrets.token_hex(6)}")
    turn: int = 0
    steps: int = 0
    #: Per turn, per step: the answers as BFCL records them (its ``all_model_response``).
    responses: list[list[Any]] = field(default_factory=list)
    functions: list[dict[str, Any]] = field(default_factory=list)
    allowed: set[str] = field(default_factory=set)
    verdict: Verdict | None = None
    #: Calls answered with an error (undecodable, refused, or failed in BFCL's executor).
    errors: int = 0
    _compiled: list[dict[str, Any]] | None = field(default=None, repr=False)

    def start(self) -> list[dict[str, Any]]:
        """Create the class instances (as BFCL does before the first turn); the first turn's messages."""
        self.functions = list(self.entry["function"])
        _, instances = upstream.execute([], self.entry, self.model_name)
        self.allowed = method_names(instances)
        self.responses = [[]]
        return self._turn_messages()

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The functions offered now, as BFCL's OpenAI handler compiles them (the same list until
        held-back functions are added)."""
        if self._compiled is None:
            self._compiled = upstream.compile_tools(self.functions)
        return self._compiled

    def _turn_messages(self) -> list[dict[str, Any]]:
        held_back = self.entry.get("missed_function", {}).get(str(self.turn))
        if held_back:
            self.functions, self._compiled = [*self.functions, *held_back], None
            return [{"role": "user", "content": upstream.bfcl().added_functions_prompt}]
        return [dict(m) for m in self.entry["question"][self.turn]]

    def step(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Answer one assistant message; the episode is over once :attr:`verdict` is set."""
        assert self.verdict is None, "the entry has been scored"
        recorded = upstream.model_responses(message)
        self.responses[-1].append(recorded)
        call_ids = [c.get("id") for c in message.get("tool_calls") or []]
        try:
            calls = upstream.decode_execute(recorded)
        except Exception as e:  # BFCL: "Failed to decode the model response. Proceed to next turn."
            why = f"Error: the function calls could not be decoded ({type(e).__name__}: {e}); none was run."
            self.errors += len(call_ids)
            return [_tool(i, why) for i in call_ids] + self._next_turn()
        if upstream.is_empty_execute_response(calls):
            self.errors += len(call_ids)
            return [_tool(i, "Error: no function call was decoded; none was run.") for i in call_ids] + self._next_turn()
        refused = [refusal(c, self.allowed) for c in calls]
        safe = [c if why is None else "agentrl_refused_call()" for c, why in zip(calls, refused, strict=True)]
        results, _ = upstream.execute(safe, self.entry, self.model_name)
        results = [r if why is None else why for r, why in zip(results, refused, strict=True)]
        self.errors += sum(r.startswith("Error during execution") for r in results)
        self.steps += 1
        out = [_tool(i, r) for i, r in zip(call_ids, results, strict=False)]
        if self.steps > upstream.bfcl().max_steps:
            self._score(force_quit=True)
        return out

    def _next_turn(self) -> list[dict[str, Any]]:
        self.turn += 1
        self.steps = 0
        if self.turn >= len(self.entry["question"]):
            self._score()
            return []
        self.responses.append([])
        return self._turn_messages()

    def _score(self, *, force_quit: bool = False) -> None:
        results = [[for_checker(step, self.allowed) for step in turn] for turn in self.responses]
        result = upstream.evaluate_multi_turn(self.entry, self.ground_truth, results, self.model_name)
        self.verdict = Verdict.of(result, force_quit=force_quit)

    def release(self) -> None:
        """Drop the class instances BFCL keeps for this episode (inference and evaluation)."""
        upstream.release_instances(self.model_name)


def _tool(call_id: str | None, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id or "", "content": content}
