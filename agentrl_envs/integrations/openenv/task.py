"""Any OpenEnv environment run as one of our tasks, behind our controller.

``agentrl-envs worker openenv --option url=http://HOST:PORT`` serves, as the task ``openenv``, the
OpenEnv server at ``url`` (a container from ``openenv build``, a Hugging Face Space, a local
``uvicorn``); ``agentrl-envs eval``, ``check``, the gymnasium env and our trainer then use it like
any task. Each of our sessions is one OpenEnv session: a WebSocket of openenv-core's own
``GenericEnvClient``.

* **tools**: the server's MCP tools (OpenEnv's ``list_tools`` action), as typed tool methods: a
  call is OpenEnv's ``call_tool`` action, its result the tool message, a ``ToolError`` the
  ``Error: ...`` the model reads (a round, as any bad call);
* **samples**: an OpenEnv environment makes its own episodes; sample ``i`` of the split ``dev``
  is ``reset(seed=i)`` (100 of them); ``--data FILE`` gives the ``reset`` arguments of each sample
  (a JSON list, or JSON lines); a client's ``custom_task`` is a ``reset``'s arguments;
* **opening messages**: a system message with the environment's ``/metadata`` description, a user
  message with the ``reset`` observation (as JSON);
* **end and reward**: the episode ends when an observation says ``done``; its reward is the sum
  of the step rewards (option ``reward=last``: the last one). Text without a tool call is sent
  as the action ``{TEXT_FIELD: text}`` when the option ``text_field`` names one, else answered
  with our usual request for a tool call.

The task's tools depend on the server, so the class ``OpenEnvTask`` (the CLI's ``openenv``)
carries none: its worker learns them when it opens (:meth:`OpenEnvTask.open_resources`) and each
session is an instance of the class made for that server's tools. :func:`openenv_task` makes that
class directly (to run the conformance suite on it, or to register it yourself).

The worker takes ``--concurrency`` sessions at once; give it at most the OpenEnv server's
``max_concurrent_envs``, or the sessions above it end ``task error`` at start.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ...errors import DataError, ToolCallError
from ...task import Task, tool
from ..typed_tools import tool_function

__all__ = ["OpenEnvConfig", "OpenEnvTask", "openenv_task"]

#: Samples of the split ``dev``: ``reset(seed=i)`` for i in range(DEV_SAMPLES).
DEV_SAMPLES = 100


class OpenEnvConfig(BaseModel):
    """Options of the ``openenv`` task (``--option KEY=VALUE``)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="the OpenEnv server, e.g. http://127.0.0.1:8000")
    max_turns: int | None = Field(default=None, description="round limit (default: the class's, 30)")
    reward: Literal["sum", "last"] = Field(
        default="sum", description="the episode's reward: the sum of the step rewards, or the last"
    )
    text_field: str | None = Field(default=None, description="an action field that carries text replies (e.g. echo's 'message')")
    timeout_s: float = Field(default=60.0, description="seconds to wait for one answer of the server")


@dataclass(frozen=True)
class Server:
    """What a worker learned from its OpenEnv server when it opened."""

    name: str
    description: str
    tools: list[dict[str, Any]]  # OpenAI tool definitions

    def required(self, tool_name: str) -> set[str]:
        """The parameters ``tool_name`` requires."""
        for t in self.tools:
            if t["function"]["name"] == tool_name:
                return set(t["function"]["parameters"].get("required") or [])
        return set()


async def describe_server(url: str, timeout: float = 60.0) -> Server:
    """The server's name and description (``/metadata``) and MCP tools (a ``list_tools`` step)."""
    from openenv.core.generic_client import GenericEnvClient

    async with httpx.AsyncClient(base_url=url, timeout=timeout) as http:
        response = await http.get("/metadata")
        meta = response.json() if response.status_code == 200 else {}
    client = GenericEnvClient(base_url=url, message_timeout_s=timeout)
    try:
        result = await client.step({"type": "list_tools"})
    except RuntimeError as e:
        raise DataError(
            f"the OpenEnv server at {url} lists no MCP tools ({e}); only tool-calling environments can be tasks"
        ) from e
    finally:
        await client.close()
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description") or t["name"],
                "parameters": t.get("input_schema") or t.get("inputSchema") or {"type": "object", "properties": {}},
            },
        }
        for t in result.observation.get("tools", [])
    ]
    if not tools:
        raise DataError(f"the OpenEnv server at {url} lists no MCP tools; only tool-calling environments can be tasks")
    return Server(str(meta.get("name") or "openenv"), str(meta.get("description") or ""), tools)


def _result_text(observation: dict[str, Any]) -> str:
    """A ``call_tool`` observation's result as the tool message's text (FastMCP results: their
    ``data``, else their text contents)."""
    error = observation.get("error")
    if error:
        raise ToolCallError(str(error.get("message") if isinstance(error, dict) else error))
    result = observation.get("result")
    if isinstance(result, dict):
        if result.get("data") is not None:
            result = result["data"]
        elif isinstance(result.get("content"), list):
            return "\n".join(str(part.get("text", "")) for part in result["content"] if isinstance(part, dict))
    return result if isinstance(result, str) else json.dumps(result)


@dataclass
class _Resources:
    config: OpenEnvConfig
    server: Server
    task_class: type[OpenEnvTask]


class OpenEnvTask(Task):
    """An OpenEnv environment as a task (see the module docstring)."""

    name = "openenv"
    max_turns = 30
    splits = ("dev",)
    concurrency = 8
    Config = OpenEnvConfig

    #: The tools of the server this class was made for (``None`` on the generic class).
    server: ClassVar[Server | None] = None

    @classmethod
    def load_samples(cls, split: str | None = None, data: str | Path | None = None) -> list[dict[str, Any]]:
        if data is not None:
            text = Path(data).read_text()
            try:
                samples = json.loads(text)
            except json.JSONDecodeError:
                samples = [json.loads(line) for line in text.splitlines() if line.strip()]
            if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
                raise DataError(f"{data}: expected a JSON list (or JSON lines) of reset arguments, one object per sample")
            return samples
        if split not in (None, "dev"):
            raise DataError(f"task 'openenv' has no split {split!r}; its splits are ['dev'] (reset(seed=i))")
        return [{"seed": i} for i in range(DEV_SAMPLES)]

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        return dict(custom_task)

    @classmethod
    async def open_resources(cls, config: BaseModel) -> _Resources:
        assert isinstance(config, OpenEnvConfig)
        server = await describe_server(config.url, config.timeout_s)
        return _Resources(config, server, cls if cls.server is not None else cls.for_server(server))

    @classmethod
    async def close_resources(cls, resources: Any) -> None:
        return None

    @classmethod
    def for_server(cls, server: Server) -> type[OpenEnvTask]:
        """The subclass whose tools are ``server``'s."""
        reserved = frozenset(n for n in dir(OpenEnvTask) if not n.startswith("__"))
        namespace: dict[str, Any] = {"server": server, "__module__": __name__, "__doc__": server.description or cls.__doc__}
        for definition in server.tools:
            namespace[definition["function"]["name"]] = tool(tool_function(definition, OpenEnvTask._call_tool, reserved=reserved))
        return type(f"OpenEnvTask_{''.join(c if c.isalnum() else '_' for c in server.name)}", (cls,), namespace)

    def __new__(cls, sample: dict[str, Any], *, config: BaseModel | None = None, resources: Any = None) -> OpenEnvTask:
        # The generic class (the CLI's ``openenv``) knows no tools: each session is an instance of
        # the class made for its worker's server, so the SDK sees that server's tools.
        if cls.server is None:
            if not isinstance(resources, _Resources):
                raise DataError("task 'openenv' learns its tools from its server: open it through a runtime (open_resources)")
            cls = resources.task_class
        return super().__new__(cls)

    def __init__(self, sample: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(sample, **kwargs)
        self._client: Any = None
        self._rewards: list[float] = []

    async def setup(self) -> list[dict[str, Any]]:
        from openenv.core.generic_client import GenericEnvClient

        config: OpenEnvConfig = self.config  # type: ignore[assignment]
        self._client = GenericEnvClient(base_url=config.url, message_timeout_s=config.timeout_s)
        result = await self._client.reset(**self.sample)
        server = type(self).server
        assert server is not None
        system = (
            f"You act in the environment {server.name!r}" + (f": {server.description}" if server.description else ".")
            + " Call its tools to act; the episode ends when the environment says it is done."
        )  # fmt: skip
        self._record(result)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(result.observation, default=str)},
        ]

    async def teardown(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        # The SDK passes every parameter; an optional one the model left unset is not sent.
        server = type(self).server
        assert server is not None
        required = server.required(name)
        args = {k: v for k, v in arguments.items() if v is not None or k in required}
        result = await self._client.step({"type": "call_tool", "tool_name": name, "arguments": args})
        self._record(result)
        return _result_text(result.observation)

    async def on_text(self, text: str) -> str | None:
        field = getattr(self.config, "text_field", None)
        if not field:
            return self.no_tool_call_message()
        result = await self._client.step({field: text})
        self._record(result)
        return json.dumps(result.observation, default=str)

    def _record(self, result: Any) -> None:
        """Note a step's reward; end the episode when the observation says ``done``."""
        if result.reward is not None:
            self._rewards.append(float(result.reward))
        if result.done and not self.done:
            config: OpenEnvConfig = self.config  # type: ignore[assignment]
            reward = sum(self._rewards) if config.reward == "sum" else (self._rewards[-1] if self._rewards else 0.0)
            self.finish(reward, openenv_steps=len(self._rewards))


def openenv_task(url: str, *, timeout: float = 60.0) -> type[OpenEnvTask]:
    """The task class of the OpenEnv server at ``url`` (its tools as methods); run it with
    ``config={"url": url}``. Synchronous: call it outside an event loop."""
    return OpenEnvTask.for_server(asyncio.run(describe_server(url, timeout)))
