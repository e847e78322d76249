"""The outside probe of issue 38, replayed against the OS worker as an attacker would: a client
with a token, over the wire, through a controller and a real OS worker process (bubblewrap
sandboxes) that hold a worker secret, a client token and an API key in their environment.

* Finding 1: nothing of the worker's environment is visible from a session, neither in the
  session's shell (``bash_action``) nor in the processes the worker enters a session with (init
  and check scripts): ``/proc/1/environ`` was bubblewrap's copy of the worker's environment.
* Finding 3: a client's ``match.regex`` that backtracks does not hold the worker: another
  session's step is answered while it is judged, and the judgement ends as a ``task error``;
  a custom task that skips ``evaluation`` is still validated.
* Item 7: every session runs under the seccomp filter (``Seccomp: 2``), which also refuses a
  user namespace from inside.
* Held: no network but the session's own loopback (the controller's port is out of reach),
  nothing written to the host, a fork bomb held by the process limit, a memory hog refused, and
  no process of a session left once it is cancelled.

Loopback only; no wall-clock assertion (the regex case checks which answer comes first).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentrl_envs.stack import LocalStack

# The OS task's test helpers (the sandbox requirement, a session's processes on the host).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "envs" / "os" / "tests"))
from os_helpers import require_sandbox, sandbox_processes  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "client-" + secrets.token_hex(12)
SECRET = "worker-" + secrets.token_hex(12)
API_KEY = "sk-" + secrets.token_hex(12)
REGEX_TIMEOUT_S = 3.0
#: Prints every ``NAME=`` of the three planted variables found in any process's environment or
#: command line, then one ``seen=N`` line counting the environments read (a control: > 0).
DUMP = r"""
n=0
for p in /proc/[0-9]*; do
  if tr '\0' '\n' < $p/environ > /tmp/e 2>/dev/null; then n=$((n+1)); cat /tmp/e; fi
  tr '\0' '\n' < $p/cmdline 2>/dev/null
done | grep -a -o -E '(AGENTRL_WORKER_SECRET|AGENTRL_CLIENT_TOKEN|OPENAI_API_KEY)=[^[:space:]]*|AGENTRL_SANDBOX=' | sort | uniq -c
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    require_sandbox()
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = API_KEY  # what the workers' environment also held in the probe
    try:
        with LocalStack(
            ["os"],
            client_token=TOKEN,
            worker_secret=SECRET,
            task_options={"os": {"regex_timeout_s": REGEX_TIMEOUT_S, "pids": 64, "memory_mb": 256}},
            log_dir=tmp_path_factory.mktemp("os-attack-logs"),
        ) as s:
            yield s
    finally:
        if saved is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = saved


def _client(stack: LocalStack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"{stack.url}/api", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)


def custom(description: str = "say hi", **fields) -> dict:
    return {"description": description, "evaluation": {"match": "hi"}, **fields}


async def start(http: httpx.AsyncClient, task: dict) -> str:
    r = await http.post("/start_sample", json={"name": "os", "index": -1, "custom_task": task})
    assert r.status_code == 200, r.text
    return r.headers["session_id"]


async def act(http: httpx.AsyncClient, sid: str, name: str, **arguments) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    r = await http.post(
        "/interact", headers={"session_id": sid}, json={"messages": [{"role": "assistant", "tool_calls": [call]}]}
    )
    assert r.status_code == 200, r.text
    return r.json()


def text(answer: dict) -> str:
    return "\n".join(m.get("content") or "" for m in answer["messages"])


# ---------------------------------------------------------------------------- finding 1


async def shell_and_init(stack: LocalStack, script: str) -> tuple[str, str]:
    """What ``script`` prints in a session's shell (``bash_action``) and as its init script (the
    worker's exec path; its output waits in a file the shell then reads)."""
    async with _client(stack) as http:
        sid = await start(http, custom(create={"init": {"code": f"{{ {script}\n}} > /root/init-saw 2>&1"}}))
        shell = text(await act(http, sid, "bash_action", script=script))
        init = text(await act(http, sid, "bash_action", script="cat /root/init-saw"))
        await http.post("/cancel", headers={"session_id": sid})
    return shell, init


async def test_no_secret_token_or_key_is_visible_from_a_session(stack):
    for seen in await shell_and_init(stack, DUMP):
        assert "AGENTRL_SANDBOX=" in seen, seen  # the control: environments were read
        for name, value in (("AGENTRL_WORKER_SECRET", SECRET), ("AGENTRL_CLIENT_TOKEN", TOKEN), ("OPENAI_API_KEY", API_KEY)):
            assert name not in seen and value not in seen, seen


# ---------------------------------------------------------------------------- item 7


async def test_every_session_process_runs_under_the_seccomp_filter(stack):
    probe = "grep '^Seccomp:' /proc/self/status; unshare -U true 2>&1; echo unshare=$?"
    for seen in await shell_and_init(stack, probe):
        assert "Seccomp:\t2" in seen, seen
        assert "unshare=1" in seen and "Operation not permitted" in seen, seen


# ---------------------------------------------------------------------------- finding 3


async def test_a_backtracking_regex_holds_no_other_session(stack):
    async with _client(stack) as http:
        victim = await start(http, custom("print ok"))
        attacker = await start(http, custom(evaluation={"match": {"regex": "(a|aa)+$"}}))
        order: list[str] = []

        async def judged() -> dict:
            answer = await act(http, attacker, "answer_action", answer="a" * 40 + "b")
            order.append("regex")
            return answer

        judging = asyncio.create_task(judged())
        await asyncio.sleep(0.5)  # the judgement is under way (it runs REGEX_TIMEOUT_S)
        step = await act(http, victim, "bash_action", script="echo ok")
        order.append("victim")
        verdict = await judging
        await http.post("/cancel", headers={"session_id": victim})
    assert "ok" in text(step)
    assert order == ["victim", "regex"], order  # before: 8.1 s of the event loop for ^(a+)+$
    assert verdict["finish"] and verdict["status"] == "task error", verdict
    assert "match.regex" in verdict["metrics"]["error"], verdict


async def test_the_probes_own_regex_is_judged_and_answered(stack):
    async with _client(stack) as http:
        sid = await start(http, custom(evaluation={"match": {"regex": "^(a+)+$"}}))
        verdict = await act(http, sid, "answer_action", answer="a" * 29 + "b")
    assert verdict["finish"] and verdict["reward"] == 0 and verdict["status"] == "completed", verdict


@pytest.mark.parametrize(
    "task, why",
    [
        ({"description": "x", "init": [], "match": {"answer": "a"}, "check": None, "max_turns": 0.5}, "max_turns"),
        ({"description": "x", "init": [], "match": {"regex": "("}, "check": None}, "does not compile"),
        ({"description": "x", "init": "rm -rf /", "match": {"answer": "a"}, "check": None}, "list of scripts"),
        ({"description": "x", "init": [], "match": None, "check": None}, "exactly one of"),
    ],
)
async def test_custom_tasks_without_evaluation_are_validated_too(stack, task, why):
    async with _client(stack) as http:
        r = await http.post("/start_sample", json={"name": "os", "index": -1, "custom_task": task})
    assert r.status_code in (400, 422) and why in r.text, r.text


# ---------------------------------------------------------------------------- held


async def test_no_network_but_the_sessions_own_loopback(stack):
    port = stack.url.rsplit(":", 1)[1]
    script = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>&1; echo tcp=$?; ip -o link 2>/dev/null | wc -l"
    async with _client(stack) as http:
        sid = await start(http, custom())
        seen = text(await act(http, sid, "bash_action", script=script))
        await http.post("/cancel", headers={"session_id": sid})
    assert "tcp=1" in seen and "Connection refused" in seen, seen  # the controller listens there, outside


async def test_nothing_is_written_to_the_host(stack):
    marker = f"agentrl-probe-{secrets.token_hex(6)}"
    async with _client(stack) as http:
        sid = await start(http, custom())
        seen = text(await act(http, sid, "bash_action", script=f"touch /tmp/{marker} /{marker} && echo wrote"))
        await http.post("/cancel", headers={"session_id": sid})
    assert "wrote" in seen  # written inside the session's own copy-on-write tree
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/{marker}").exists()


async def test_a_fork_bomb_is_held_by_the_process_limit_and_a_memory_hog_refused(stack):
    async with _client(stack) as http:
        bomb = await start(http, custom())
        # The bomb runs in the background; the shell then counts the session's processes.
        seen = text(
            await act(http, bomb, "bash_action", script="b() { b | b & }; b 2>/dev/null; sleep 3; ls -d /proc/[0-9]* | wc -l")
        )
        hog = await start(http, custom())
        memory = text(await act(http, hog, "bash_action", script="python3 -c 'b = bytearray(2 * 1024**3)'; echo rc=$?"))
        other = await start(http, custom())
        alive = text(await act(http, other, "bash_action", script="echo alive"))
        for sid in (bomb, hog, other):
            await http.post("/cancel", headers={"session_id": sid})
    counts = [int(line) for line in seen.split() if line.isdigit()]
    assert counts and counts[-1] <= 64 + 2, seen  # at most the session's 64 processes (+ /proc's own entries)
    assert "rc=137" in memory or "MemoryError" in memory, memory
    assert "alive" in alive


async def test_no_process_of_a_session_is_left_after_cancel(stack):
    async with _client(stack) as http:
        sid = await start(http, custom())
        seen = text(await act(http, sid, "bash_action", script="(sleep 600 &) ; (setsid sleep 600 &) ; echo $AGENTRL_SANDBOX"))
        box = seen.strip().splitlines()[-1]
        assert box, seen
        assert sandbox_processes(box)  # the sleeps run
        r = await http.post("/cancel", headers={"session_id": sid})
        assert r.status_code == 200
        for _ in range(100):
            if not sandbox_processes(box):
                break
            await asyncio.sleep(0.1)
    assert not sandbox_processes(box)
