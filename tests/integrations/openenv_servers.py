"""Helpers of the OpenEnv tests: an ASGI app on a loopback port, and a small OpenEnv environment.

``EchoWordEnvironment`` is written the way OpenEnv's own echo env is (an openenv-core
``Environment`` that answers OpenEnv's MCP actions ``list_tools`` / ``call_tool`` itself), with
an episode to win: ``reset(seed=k)`` picks a word, ``echo_message`` echoes, ``submit(answer)``
ends the episode with reward 1 for the word, else 0.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import Observation, State
from pydantic import Field

from agentrl_envs.stack import free_port

WORDS = ("apple", "river", "violet", "copper", "meadow")


class WordObservation(Observation):
    prompt: str = Field(default="", description="what the episode asks for")


class EchoWordEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    TOOLS = [
        Tool(
            name="echo_message",
            description="Echo a message back.",
            input_schema={
                "type": "object",
                "properties": {"message": {"type": "string", "description": "The message."}},
                "required": ["message"],
            },
        ),
        Tool(
            name="submit",
            description="Submit the answer; ends the episode.",
            input_schema={
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "The word."}},
                "required": ["answer"],
            },
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self.word = WORDS[0]
        self.done = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> WordObservation:
        self.word = WORDS[(seed or 0) % len(WORDS)]
        self.done = False
        self._state = State(episode_id=episode_id or f"ep-{seed}", step_count=0)
        return WordObservation(prompt=f"Submit the word {self.word!r}.", reward=0.0)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:  # type: ignore[override]
        self._state.step_count += 1
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=self.TOOLS)
        assert isinstance(action, CallToolAction)
        if action.tool_name == "echo_message":
            return CallToolObservation(tool_name="echo_message", result=action.arguments.get("message", ""), reward=0.0)
        if action.tool_name == "submit":
            self.done = True
            reward = 1.0 if action.arguments.get("answer") == self.word else 0.0
            return CallToolObservation(tool_name="submit", result="submitted", reward=reward, done=True)
        error = ToolError(error_type=ToolErrorType.TOOL_NOT_FOUND, message=f"no tool {action.tool_name!r}")
        return CallToolObservation(tool_name=action.tool_name, result=None, error=error, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


def echo_word_app(max_sessions: int = 16) -> Any:
    """openenv-core's app for :class:`EchoWordEnvironment` (MCP actions, as OpenEnv's echo env takes)."""
    return create_fastapi_app(EchoWordEnvironment, CallToolAction, CallToolObservation, max_concurrent_envs=max_sessions)


class AppServer:
    """``with AppServer(app) as url:`` serves ``app`` with uvicorn (HTTP and WebSocket) on a free port."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", ws="websockets-sansio", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
