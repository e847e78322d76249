"""AgentBench's OS judging: ``match`` (pure) and the ``check`` chain (scripts in the sandbox).

* ``match``: the answer (stripped when ``strip``) equals ``answer``, or ``re.search(regex, answer)``
  (AgentBench's test, run by the ``regex`` package, whose syntax is ``re``'s, with a time bound:
  a client's ``custom_task`` brings its own pattern, and one like ``(a|aa)+$`` backtracks for
  minutes on a short answer; see :func:`evaluate_match`).
* ``check``: scripts run in order as independent processes with argv ``[answer, out_1, ...]``
  (bash: ``bash -c CODE -- ARGS``, so ``$1`` is the answer; python: ``python3 -c CODE ARGS``); a
  ``None`` entry runs ``example`` instead; each script's stdout is appended to the argv of the next.
  The answer is right when every script exits 0.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import regex

from agentrl_envs.sandbox import CommandResult

#: Seconds one regex match may take; past it :func:`evaluate_match` raises ``TimeoutError``.
REGEX_TIMEOUT_S = 1.0

#: Runs ``(script, args)`` in the session's sandbox; returns its result (stdout only).
Runner = Callable[[dict[str, str], Sequence[str]], Awaitable[CommandResult]]


def evaluate_match(answer: str | None, match: dict[str, Any], *, timeout: float = REGEX_TIMEOUT_S) -> bool:
    """Whether ``answer`` passes ``match``. A regex search runs at most ``timeout`` seconds (then
    ``TimeoutError``) and releases the GIL while it runs; call it off the event loop."""
    if answer is None:
        return False
    if match.get("strip", False):
        answer = answer.strip()
    if "answer" in match:
        return answer == match["answer"]
    if "regex" in match:
        return regex.search(match["regex"], answer, timeout=timeout, concurrent=True) is not None
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


def script_command(script: dict[str, str]) -> str:
    """The ``bash -c`` script that runs a check script with the sandbox's ``exec`` args as its argv.

    Args arrive as ``$1 = code, $2... = params``; stderr is dropped (AgentBench passes only stdout
    down the check chain).
    """
    if script["language"] == "python":
        return 'code=$1; shift; exec python3 -c "$code" "$@" 2>/dev/null'
    return 'code=$1; shift; exec bash -c "$code" -- "$@" 2>/dev/null'


#: Runs ``argv[1:]`` as ``docker exec`` runs a command for AgentBench (moby's exec exit handler):
#: stdout and stderr go to one pipe, read until it closes, but at most 2 s after the command
#: exits, so that background processes it leaves holding the pipe do not hold the exec open.
_EXEC_LIKE_DOCKER = """
import os, select, subprocess, sys, time
r, w = os.pipe()
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=w, stderr=w)
os.close(w)
out, deadline = bytearray(), None
while True:
    if deadline is None and p.poll() is not None:
        deadline = time.monotonic() + 2
    wait = 0.05 if deadline is None else deadline - time.monotonic()
    if wait < 0:
        break
    if select.select([r], [], [], wait)[0]:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        out += chunk
sys.stdout.buffer.write(out)
sys.exit(p.wait())
"""


def init_command(script: dict[str, str]) -> str:
    """The ``bash -c`` script that runs an ``init`` script (``$1`` = its code) as ``docker exec``
    does for AgentBench: it returns when the script has exited and its output is closed, or 2 s
    after it exited if background processes keep the output open (``(sleep 60) &``:
    ``7/bootstrap.json`` 0). stdout and stderr come back merged (for the error message)."""
    run = 'python3 -c "$code"' if script["language"] == "python" else 'bash -c "$code" --'
    return f"code=$1; exec python3 -c {shlex.quote(_EXEC_LIKE_DOCKER)} {run}"
