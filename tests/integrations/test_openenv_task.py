"""An OpenEnv environment as one of our tasks: conformance, and episodes through our controller.

The OpenEnv server is openenv-core's own app serving a small MCP-tool environment written as
OpenEnv's echo env is (:mod:`openenv_servers`), on a loopback port.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("openenv.core")
from openenv_servers import WORDS, AppServer, echo_word_app  # noqa: E402

from agentrl_envs.client import AsyncControllerClient  # noqa: E402
from agentrl_envs.conformance import (  # noqa: E402
    check_bad_calls,
    check_gym_env,
    check_teardown,
    check_tool_schemas,
    check_turn_limit,
)
from agentrl_envs.errors import DataError  # noqa: E402
from agentrl_envs.integrations.openenv.task import OpenEnvTask, openenv_task  # noqa: E402
from agentrl_envs.policy import call_turn  # noqa: E402
from agentrl_envs.stack import LocalStack  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def url() -> Any:
    with AppServer(echo_word_app()) as url:
        yield url


def test_the_task_class_has_the_servers_tools(url: str) -> None:
    cls = openenv_task(url)
    assert issubclass(cls, OpenEnvTask) and cls.name == "openenv"
    tools = {t["function"]["name"]: t["function"] for t in cls.tool_definitions()}
    assert set(tools) == {"echo_message", "submit"}
    assert tools["submit"]["parameters"]["required"] == ["answer"]
    assert tools["submit"]["parameters"]["properties"]["answer"]["description"] == "The word."
    # The generic class knows no tools; it cannot make a session without its server.
    assert OpenEnvTask.tool_definitions() == []
    with pytest.raises(DataError, match="learns its tools"):
        OpenEnvTask({"seed": 0})


@pytest.mark.parametrize("check", [check_tool_schemas, check_bad_calls, check_turn_limit, check_teardown, check_gym_env])
def test_protocol_conformance(url: str, check: Any) -> None:
    check(openenv_task(url), config={"url": url})


async def test_episodes_through_our_controller(url: str) -> None:
    """``agentrl-envs worker openenv --option url=...`` (started by LocalStack, as ``up`` and ``eval`` do),
    then the wire-level conformance checks (``agentrl-envs conform``) on that worker."""
    from agentrl_envs.conformance.wire.run import run_conformance

    with LocalStack(["openenv"], task_options={"openenv": {"url": url, "max_turns": 5}}) as stack:
        async with AsyncControllerClient(stack.url) as client:
            assert len(await client.get_indices("openenv")) == 100
            for index, answer, reward in [(2, WORDS[2], 1.0), (3, "wrong", 0.0)]:
                sid, first = await client.start_sample("openenv", index)
                assert [t["function"]["name"] for t in first.tools] == ["echo_message", "submit"]
                assert json.loads(first.messages[-1]["content"]) == {"prompt": f"Submit the word {WORDS[index % len(WORDS)]!r}."}
                out = await client.interact(sid, [call_turn("echo_message", {"message": "hello"})])
                assert out.messages[0]["content"] == "hello" and not out.finish
                out = await client.interact(sid, [call_turn("no_such_tool", {})])
                assert "unknown tool" in out.messages[0]["content"] and not out.finish
                out = await client.interact(sid, [call_turn("submit", {"answer": answer})])
                assert out.finish and out.status.value == "completed" and out.reward == reward
            # A client's custom task is a reset's arguments.
            sid, first = await client.start_sample("openenv", -1, custom_task={"seed": 4})
            assert WORDS[4] in first.messages[-1]["content"]
            await client.cancel(sid)
        checks = ["health", "tool_schemas", "bad_calls", "turn_limit", "cancel", "capacity"]
        report = run_conformance(stack.url, "openenv", checks=checks)
        assert [r.outcome for r in report.results] == ["passed"] * len(checks), report.text()
