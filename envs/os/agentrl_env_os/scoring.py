"""AgentBench's OS judging: ``match`` (pure) and the ``check`` chain (scripts in the sandbox).

* ``match``: the answer (stripped when ``strip``) equals ``answer``, or ``re.search(regex, answer)``.
* ``check``: scripts run in order as independent processes with argv ``[answer, out_1, ...]``
  (bash: ``bash -c CODE -- ARGS``, so ``$1`` is the answer; python: ``python3 -c CODE ARGS``); a
  ``None`` entry runs ``example`` instead; each script's stdout is appended to the argv of the next.
  The answer is right when every script exits 0.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentrl_envs.sandbox import CommandResult

#: Runs ``(script, args)`` in the session's sandbox; returns its result (stdout only).
Runner = Callable[[dict[str, str], Sequence[str]], Awaitable[CommandResult]]


def evaluate_match(answer: str | None, match: dict[str, Any]) -> bool:
    if answer is None:
        return False
    if match.get("strip", False):
        answer = answer.strip()
    if "answer" in match:
        return answer == match["answer"]
    if "regex" in match:
        return re.search(match["regex"], answer) is not None
    return False


async def evaluate_check(
    answer: str | None, chain: Sequence[dict[str, str] | None], example: dict[str, str] | None, run: Runner
) -> tuple[bool, list[str]]:
    """Run the chain; return (all exited 0, the outputs collected so far)."""
    params = [str(answer)]
    for script in chain:
        script = script if script is not None else example
        if script is None:
            return False, params[1:]
        result = await run(script, list(params))
        if not result.ok:
            return False, params[1:]
        params.append(result.output)
    return True, params[1:]


def script_command(script: dict[str, str], *, keep_stderr: bool = False) -> str:
    """The ``bash -c`` script that runs ``script`` with the sandbox's ``exec`` args as its argv.

    Args arrive as ``$1 = code, $2... = params``; stderr is dropped unless ``keep_stderr``
    (AgentBench passes only stdout down the check chain).
    """
    redirect = "" if keep_stderr else " 2>/dev/null"
    if script["language"] == "python":
        return f'code=$1; shift; exec python3 -c "$code" "$@"{redirect}'
    return f'code=$1; shift; exec bash -c "$code" -- "$@"{redirect}'
