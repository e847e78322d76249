"""Message builders of the schema module."""

from __future__ import annotations

import json

from agentrl_envs.protocol.openai import Message, worked_example


def test_worked_example_pairs_each_call_with_its_tool_reply() -> None:
    messages = worked_example(
        "Question: what is 2 + 2?",
        [("execute_sql", {"query": "SELECT 2 + 2"}, "[(4,)]"), ("commit_final_answer", {"answers": ["4"]}, "ok")],
        id_prefix="ex",
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert messages[0] == {"role": "user", "content": "Question: what is 2 + 2?"}
    first, second = messages[1]["tool_calls"][0], messages[3]["tool_calls"][0]
    assert (first["id"], second["id"]) == ("ex_0", "ex_1")  # deterministic: the same prompt head every episode
    assert first["function"] == {"name": "execute_sql", "arguments": json.dumps({"query": "SELECT 2 + 2"})}
    assert messages[2] == {"role": "tool", "tool_call_id": "ex_0", "content": "[(4,)]"}
    assert messages[4] == {"role": "tool", "tool_call_id": "ex_1", "content": "ok"}
    parsed = [Message.model_validate(m) for m in messages]  # valid OpenAI chat messages
    assert parsed[3].tool_calls[0].function.name == "commit_final_answer"
    assert worked_example("Q", []) == [{"role": "user", "content": "Q"}]


def test_one_error_tree_with_one_class_per_code():
    """Every exception the packages raise over the wire is in one tree, and a code names one class."""
    import agentrl_envs.chat.errors
    import agentrl_envs.containers.build
    import agentrl_envs.containers.engine
    import agentrl_envs.sandbox.base
    import agentrl_envs.transport.upstream  # noqa: F401
    from agentrl_envs.errors import AgentRLEnvsError

    def walk(cls: type) -> list[type]:
        return [cls, *(c for sub in cls.__subclasses__() for c in walk(sub))]

    classes = [c for c in walk(AgentRLEnvsError) if c.__module__.startswith("agentrl_envs")]
    names = {c.__name__ for c in classes}
    assert {"SandboxError", "UpstreamError", "DockerUnavailable", "BuildError", "BadModelRequestError"} <= names
    codes: dict[str, str] = {}
    for c in classes:
        if "code" in vars(c):
            assert c.code not in codes, f"{c.__name__} and {codes[c.code]} share the code {c.code!r}"
            codes[c.code] = c.__name__
    undeclared = [c.__name__ for c in classes if "code" not in vars(c)]
    assert not undeclared, f"classes without a code of their own: {undeclared}"


def test_the_hand_built_wire_bodies_equal_the_models_dumps():
    """The hot path builds its bodies by hand for speed; they must be exactly the typed models'."""
    from agentrl_envs.protocol.agentrl import (
        EnvOutput,
        InteractResponse,
        SampleStatus,
        StartSampleResponse,
        WorkerInteractResponse,
        client_view,
    )

    outs = [
        EnvOutput(messages=[{"role": "tool", "tool_call_id": "c1", "content": "5"}], metric={"turns": 1}),
        EnvOutput(
            messages=[{"role": "user", "content": "q"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            status=SampleStatus.COMPLETED,
            finish=True,
            reward=1.0,
        ),
        EnvOutput(),
    ]
    for out in outs:
        step = out.wire(tools=False)
        assert step == out.model_dump(mode="json", exclude={"tools"})
        wrapped = {"session_id": 7, "env_out": step}
        assert WorkerInteractResponse.model_validate(wrapped).model_dump(mode="json", exclude={"env_out": {"tools"}}) == wrapped
        start = out.wire(tools=True)
        assert start == {**out.model_dump(mode="json"), "tools": out.tools or []}
        # The controller's view of each, against the client models.
        view = client_view(step)
        assert "tools" not in view  # a step that did not change the tools
        assert InteractResponse.model_validate(view).model_dump(mode="json", exclude_none=True) == view
        view = client_view(start, tools=True)
        assert StartSampleResponse.model_validate(view).model_dump(mode="json") == view
        # A step that changed the session's tools carries them through to the client.
        changed = out.wire(tools=True)
        view = client_view(changed)
        assert view["tools"] == (out.tools or [])
        assert InteractResponse.model_validate(view).model_dump(mode="json") == view
    assert client_view({}) == InteractResponse(finish=False, reward=0, status=SampleStatus.RUNNING).model_dump(
        mode="json", exclude_none=True
    )
