"""Our tasks served as OpenEnv environments, driven by openenv-core's own clients.

``GenericEnvClient`` (OpenEnv's session protocol over ``/ws``: reset / step / state) plays each
task's reference solution with ``message`` actions; ``MCPToolClient`` (``list_tools``,
``call_tool``) plays db with OpenEnv's MCP tool actions; the HTTP routes answer as openenv-core
defines them; and the same app serves a task behind a controller.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("openenv.core")
from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.mcp_client import MCPToolClient  # noqa: E402
from openenv_servers import AppServer  # noqa: E402

from agentrl_envs.integrations.openenv.serve import create_openenv_app  # noqa: E402
from agentrl_envs.policy import as_policy  # noqa: E402
from agentrl_envs.registry import get_task  # noqa: E402
from agentrl_envs.stack import LocalStack  # noqa: E402

pytestmark = pytest.mark.timeout(300)
SPLIT = "easy"


@pytest.fixture(scope="module")
def db_url() -> Any:
    app = create_openenv_app("db", split=SPLIT)
    with AppServer(app) as url:
        yield url


async def play_reference(client: GenericEnvClient, task: str, index: int) -> tuple[Any, int]:
    """The task's reference policy plays sample ``index`` with ``message`` actions; the last step's result."""
    sample = get_task(task).load_samples(split=SPLIT)[index]
    policy = as_policy(get_task(task).reference_policy(sample))
    result = await client.reset(index=index)
    obs = result.observation
    assert obs["index"] == index and obs["status"] == "running" and not result.done
    messages, tools = list(obs["messages"]), obs["tool_schemas"]
    assert [t["function"]["name"] for t in tools] == [t["function"]["name"] for t in get_task(task).tool_definitions()]
    steps = 0
    while not result.done:
        message = await policy.act(messages, tools)
        assert message is not None, f"the reference stopped before the episode ended: {messages[-3:]}"
        result = await client.step(
            {"type": "message", "content": message.get("content"), "tool_calls": message.get("tool_calls") or []}
        )
        messages += [message, *result.observation["messages"]]
        steps += 1
    return result, steps


@pytest.mark.parametrize("task", ["db", "kg"])
async def test_generic_client_plays_the_reference_to_reward_1(task: str) -> None:
    app = create_openenv_app(task, split=SPLIT)
    with AppServer(app) as url:
        async with GenericEnvClient(base_url=url) as client:
            result, steps = await play_reference(client, task, 0)
            assert result.reward == 1.0 and result.observation["status"] == "completed"
            state = await client.state()
            assert state["task"] == task and state["index"] == 0 and state["step_count"] == steps and state["reward"] == 1.0
            # The episode is over: a further step is refused (openenv-core raises the server's error).
            with pytest.raises(RuntimeError, match="episode ended"):
                await client.step({"type": "message", "content": "more"})
            # A new reset starts another sample on the same connection; a bad call is the task's answer.
            result = await client.reset(index=1)
            assert result.observation["index"] == 1
            result = await client.step({"type": "call_tool", "tool_name": "no_such_tool", "arguments": {}})
            assert not result.done and "unknown tool" in result.observation["result"]


async def test_mcp_tool_client_plays_db_with_tool_actions(db_url: str) -> None:
    sample = get_task("db").load_samples(split=SPLIT)[0]
    calls = get_task("db").reference_policy(sample)
    async with MCPToolClient(base_url=db_url) as env:
        await env.reset(index=0)
        tools = await env.list_tools()
        assert [t.name for t in tools] == ["execute_sql", "commit_final_answer"]
        assert tools[0].input_schema["required"] == ["query"]
        for call in calls[:-1]:
            answer = await env.call_tool(call["name"], **call["arguments"])
            assert isinstance(answer, str) and not answer.startswith("Error")
        last = await env.step(CallToolAction(tool_name=calls[-1]["name"], arguments=calls[-1]["arguments"]))
        assert last.done and last.reward == 1.0


def test_http_routes(db_url: str) -> None:
    with httpx.Client(base_url=db_url, timeout=30) as http:
        assert http.get("/health").json()["status"] == "healthy"
        assert http.get("/metadata").json()["name"] == "db"
        action = http.get("/schema").json()["action"]
        assert set(action["properties"]["type"]["enum"]) == {"message", "call_tool", "list_tools"}
        reset = http.post("/reset", json={"index": 1}).json()
        assert reset["done"] is False and reset["observation"]["index"] == 1
        assert reset["observation"]["messages"][-1]["role"] == "user"
        # openenv-core's HTTP /step builds a fresh environment per request: no episode to continue.
        assert http.post("/step", json={"action": {"type": "message", "content": "hi"}}).status_code == 500


async def test_a_task_behind_a_controller() -> None:
    with LocalStack(["db"], split=SPLIT) as stack:
        app = create_openenv_app("db", controller=stack.url)
        with AppServer(app) as url:
            async with GenericEnvClient(base_url=url) as client:
                result, _ = await play_reference(client, "db", 0)
                assert result.reward == 1.0
        sessions = httpx.get(f"{stack.url}/api/list_sessions").json()
        assert not any(sessions.values()) if isinstance(sessions, dict) else not sessions


async def test_the_cli_serves_a_task(tmp_path: Any) -> None:
    """``agentrl-envs openenv serve echo``: an OpenEnv server process that openenv-core's client plays."""
    import subprocess
    import sys
    import time

    from agentrl_envs.cli import main
    from agentrl_envs.stack import free_port

    assert main(["openenv", "serve", "echo", "--host", "0.0.0.0"]) == 2  # no authentication: loopback only
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl_envs.cli", "openenv", "serve", "echo", "--port", str(port), "--log-level", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        async with GenericEnvClient(base_url=f"http://127.0.0.1:{port}") as client:
            result = await client.reset(index=0)
            word = result.observation["messages"][-1]["content"].split("'")[1]  # Echo the word 'x'.
            result = await client.step({"type": "call_tool", "tool_name": "echo", "arguments": {"text": word}})
            assert result.done and result.reward == 1.0, result
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
