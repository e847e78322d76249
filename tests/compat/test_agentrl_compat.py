"""Wire compatibility with AgentRL's own published packages (agentrl-worker, agentrl-eval).

1. An AgentRL task served by ``agentrl.worker.TaskWorker`` registers with *our* controller and is
   driven through it by our client.
2. *Our* worker, behind our controller, is driven by ``agentrl.eval``'s ``ControllerClient``,
   i.e. the exact calls AgentRL's evaluation client makes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ci_helpers import require
from stack_helpers import wait_for

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.stack import free_port
from agentrl_envs.tasks.echo import EchoTask

pytestmark = pytest.mark.compat
require("agentrl.worker.task_worker")


def tool_call(name: str, args: dict, call_id: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
    }


async def test_agentrl_worker_registers_with_our_controller_and_is_driven_through_it(make_stack, tmp_path):
    stack = make_stack()
    port = free_port()
    log = open(tmp_path / "agentrl-worker.log", "wb")
    script = Path(__file__).with_name("agentrl_counter_task.py")
    proc = subprocess.Popen([sys.executable, str(script), f"{stack.url}/api", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: proc.poll() is None and bool(httpx.get(f"{stack.url}/api/list_workers").json().get("agentrl-counter")),
            timeout=60,
        )
        async with AsyncControllerClient(stack.url) as client:
            assert await client.get_indices("agentrl-counter") == [0, 1]
            sid, first = await client.start_sample("agentrl-counter", 1)
            assert first.messages == [{"role": "user", "content": "Count from 1 to 3 (sample 1)."}]
            assert first.tools[0]["function"]["name"] == "count"
            for n in (1, 2):
                out = await client.interact(sid, [tool_call("count", {"n": n}, f"c{n}")])
                assert not out.finish and out.status.value == "running"
                assert out.messages == [{"role": "tool", "tool_call_id": f"c{n}", "content": f"ok {n}"}]
            out = await client.interact(sid, [tool_call("count", {"n": 3}, "c3")])
            assert out.finish and out.status.value == "completed" and out.reward == 1
            assert out.metrics == {"counted": 3}

            # A wrong action ends the AgentRL task with its own status, passed through unchanged.
            sid, _ = await client.start_sample("agentrl-counter", 0)
            out = await client.interact(sid, [tool_call("count", {"n": 2}, "x")])
            assert out.finish and out.status.value == "agent invalid action" and out.reward == 0

            # Cancel reaches the AgentRL worker and frees its slot.
            sid, _ = await client.start_sample("agentrl-counter", 0)
            await client.cancel(sid)
            wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/api/worker_status").json()["current"] == 0)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


async def test_agentrl_eval_client_drives_our_controller_and_worker(make_stack):
    from agentrl.eval.session.controller import ControllerClient as AgentRLClient
    from agentrl.eval.session.types import InteractResponse as AgentRLInteractResponse
    from agentrl.eval.session.types import SampleStatus as AgentRLStatus

    stack = make_stack()
    stack.add_worker(EchoTask)
    client = AgentRLClient(f"{stack.url}/api/", proxy_url=None)
    try:
        assert await client.get_indices("echo") == list(range(8))
        sid, first = await client.start_sample("echo", 2)
        assert isinstance(first, AgentRLInteractResponse) and not first.finish
        assert [t["function"]["name"] for t in first.tools] == ["echo"]
        word = EchoTask.load_samples()[2]["word"]
        out = await client.interact(sid, [tool_call("echo", {"text": "not it"}, "a")])
        assert not out.finish and out.messages[0]["content"] == "not it"
        out = await client.interact(sid, [tool_call("echo", {"text": word}, "b")])
        assert out.finish and out.status == AgentRLStatus.COMPLETED and out.reward == 1.0
        assert out.status.is_completed()

        sid, _ = await client.start_sample("echo", 0)
        await client.cancel(sid)
        assert sid not in {s["session_id"] for s in httpx.get(f"{stack.url}/api/list_sessions").json()}
        with pytest.raises(RuntimeError, match="already ended"):
            await client.interact(sid, [tool_call("echo", {"text": "x"}, "c")])
    finally:
        await client.close()
