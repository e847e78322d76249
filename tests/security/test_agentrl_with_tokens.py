"""AgentRL's own published packages keep working with tokens set (issue 17, done-when 1): they send
no headers of their own, so the token rides in the controller URL's userinfo, which their HTTP
clients (httpx in agentrl-eval, aiohttp in agentrl-worker) send as HTTP Basic."""

from __future__ import annotations

import json

import pytest
from ci_helpers import require
from security_helpers import BOB, agentrl_counter_worker

from agentrl_envs.client import AsyncControllerClient

pytestmark = pytest.mark.compat
require("agentrl.worker.task_worker")


def with_userinfo(url: str, token: str) -> str:
    return url.replace("http://", f"http://agentrl:{token}@")


def tool_call(name: str, args: dict, call_id: str) -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}


async def test_agentrl_eval_client_with_a_token_in_its_url(secure_stack):
    from agentrl.eval.session.controller import ControllerClient as AgentRLClient

    client = AgentRLClient(f"{with_userinfo(secure_stack.url, BOB)}/api/", proxy_url=None)
    anonymous = AgentRLClient(f"{secure_stack.url}/api/", proxy_url=None)
    try:
        assert await client.get_indices("calc") == [0, 1]
        sid, first = await client.start_sample("calc", 0)
        assert not first.finish
        out = await client.interact(sid, [tool_call("answer", {"value": 5}, "a")])
        assert out.finish and out.reward == 1
        with pytest.raises(Exception, match="401|unauthorized"):
            await anonymous.get_indices("calc")
    finally:
        await client.close()
        await anonymous.close()


async def test_agentrl_worker_registers_with_the_secret_in_its_controller_url(secure_stack, tmp_path):
    with agentrl_counter_worker(secure_stack.url, tmp_path / "agentrl-worker.log"):
        async with AsyncControllerClient(secure_stack.url, token=BOB) as client:
            sid, _ = await client.start_sample("agentrl-counter", 1)
            for n in (1, 2, 3):
                out = await client.interact(sid, [tool_call("count", {"n": n}, f"c{n}")])
            assert out.finish and out.reward == 1
