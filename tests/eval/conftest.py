"""In-process stand-ins for the eval tests: a scripted OpenAI-compatible model and a controller.

Both are small FastAPI apps served by uvicorn on 127.0.0.1 in a background thread, so the code
under test talks real HTTP through the real OpenAI SDK and the real ``AsyncControllerClient``.
The controller stand-in speaks the client side of AgentRL's protocol over the ``echo`` task,
with switches to inject infrastructure failures. ``echo_stack`` is the real thing: the embedded
controller and an ``echo`` worker as subprocesses, shared by the tests of a session.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrl_envs import Episode, TaskRuntime, get_task


def _error(status: int, code: str, detail: str, **data: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, "error": code, "data": data}, status_code=status)


class FakeController:
    """The client API of the controller over in-process ``echo`` episodes.

    Failure switches: ``start_failures[index]`` answers that many ``start_sample`` calls with 503
    (``-1``: forever); ``capacity_failures`` answers that many starts with 406;
    ``task_error_indices`` end their episode with status ``task error`` at the first interact.
    """

    def __init__(self) -> None:
        self.runtime = TaskRuntime(get_task("echo"), split="dev")
        self.sessions: dict[int, Episode] = {}
        self.next_id = 1
        self.start_failures: dict[int, int] = {}
        self.capacity_failures = 0
        self.task_error_indices: set[int] = set()
        self.starts: Counter[int] = Counter()
        self.cancelled: list[int] = []
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/api/get_indices")
        async def get_indices(name: str) -> Any:
            if name != "echo":
                return _error(503, "no_worker", f"no worker serves {name!r}")
            return self.runtime.indices

        @app.post("/api/start_sample")
        async def start_sample(request: Request) -> Any:
            body = await request.json()
            index = body["index"]
            self.starts[index] += 1
            remaining = self.start_failures.get(index, 0)
            if remaining:
                self.start_failures[index] = remaining - 1 if remaining > 0 else remaining
                return _error(503, "no_worker", "injected: no live worker")
            if self.capacity_failures:
                self.capacity_failures -= 1
                return _error(406, "capacity_exceeded", "injected: worker full", active_sessions=4, max_sessions=4)
            episode = self.runtime.episode(index)
            out = await episode.start()
            sid, self.next_id = self.next_id, self.next_id + 1
            self.sessions[sid] = episode
            return JSONResponse({"messages": out.messages, "tools": out.tools}, headers={"session_id": str(sid)})

        @app.post("/api/interact")
        async def interact(request: Request) -> Any:
            sid = int(request.headers["session_id"])
            episode = self.sessions.get(sid)
            if episode is None:
                return _error(404, "unknown_session", f"no session {sid}")
            body = await request.json()
            if episode.index in self.task_error_indices:
                out = await episode.abort("injected task failure")
            else:
                out = await episode.step(body["messages"])
            if out.finish:
                del self.sessions[sid]
            return {
                "finish": out.finish,
                "reward": out.reward,
                "status": out.status.value,
                "messages": out.messages,
                "metrics": out.metric,
            }

        @app.post("/api/cancel")
        async def cancel(request: Request) -> Any:
            sid = int(request.headers["session_id"])
            self.cancelled.append(sid)
            episode = self.sessions.pop(sid, None)
            if episode is not None:
                await episode.close()
            return {}

        return app


# A policy maps (word, turn) to the assistant reply: ("call", text) calls echo(text), ("say", text)
# answers in plain text without a tool call.
Policy = Callable[[str, int], tuple[str, str]]


def correct(word: str, turn: int) -> tuple[str, str]:
    return ("call", word)


class FakeModel:
    """A scripted OpenAI-compatible chat endpoint for the echo task (``/v1/models``, ``/v1/chat/completions``).

    ``policies`` answer requests for other model names than ``name`` (several models behind one
    server). ``usage`` is deterministic: 10 prompt tokens per message sent, 3 completion tokens.
    ``gate_after = N``: the requests after the first N wait until ``gate`` is set (``waiting``
    counts them), to freeze a run with episodes in flight.
    """

    PROMPT_TOKENS_PER_MESSAGE = 10
    COMPLETION_TOKENS = 3

    def __init__(self, policy: Policy = correct, name: str = "fake-model", policies: dict[str, Policy] | None = None) -> None:
        self.policy = policy
        self.name = name
        self.policies = dict(policies or {})
        self.fail_next = 0
        self.fail_on: set[tuple[str, int]] = set()
        self.context_overflow: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self.gate_after: int | None = None
        self.gate = threading.Event()
        self.waiting = 0
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> Any:
            names = [self.name, *self.policies]
            return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "test"} for n in names]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            if self.gate_after is not None and len(self.requests) >= self.gate_after:
                self.waiting += 1
                while not self.gate.is_set():
                    await asyncio.sleep(0.01)
                self.waiting -= 1
            self.requests.append(body)
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            word = re.search(r"Echo the word '(\w+)'", user).group(1)
            turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
            if self.fail_next or (word, turn) in self.fail_on:
                self.fail_next = max(0, self.fail_next - 1)
                self.fail_on.discard((word, turn))
                return JSONResponse({"error": {"message": "injected model failure", "type": "server_error"}}, status_code=500)
            if word in self.context_overflow:
                detail = "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens."
                return JSONResponse({"error": {"message": detail, "type": "invalid_request_error"}}, status_code=400)
            kind, text = self.policies.get(body["model"], self.policy)(word, turn)
            message: dict[str, Any] = {"role": "assistant", "content": None}
            if kind == "call":
                arguments = json.dumps({"text": text})
                message["tool_calls"] = [
                    {"id": f"call_{word}_{turn}", "type": "function", "function": {"name": "echo", "arguments": arguments}}
                ]
            else:
                message["content"] = text
            finish = "tool_calls" if kind == "call" else "stop"
            return {
                "id": f"chatcmpl-{word}-{turn}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": self.PROMPT_TOKENS_PER_MESSAGE * len(body["messages"]),
                    "completion_tokens": self.COMPLETION_TOKENS,
                    "total_tokens": self.PROMPT_TOKENS_PER_MESSAGE * len(body["messages"]) + self.COMPLETION_TOKENS,
                },
            }

        return app


def serve_in_thread(app: FastAPI) -> tuple[str, Callable[[], None]]:
    """Serve ``app`` on a free port of 127.0.0.1; return its base URL and a stop function."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{port}", stop


@pytest.fixture
def serve() -> Iterator[Callable[[FastAPI], str]]:
    stops: list[Callable[[], None]] = []

    def start(app: FastAPI) -> str:
        url, stop = serve_in_thread(app)
        stops.append(stop)
        return url

    yield start
    for stop in stops:
        stop()


@pytest.fixture
def controller(serve: Callable[[FastAPI], str]) -> tuple[FakeController, str]:
    fake = FakeController()
    return fake, serve(fake.app)


@pytest.fixture
def model(serve: Callable[[FastAPI], str]) -> Callable[..., tuple[FakeModel, str]]:
    """``fake, base_url = model(policy)``: a scripted model server; ``base_url`` ends in ``/v1``."""

    def make(
        policy: Policy = correct, name: str = "fake-model", policies: dict[str, Policy] | None = None
    ) -> tuple[FakeModel, str]:
        fake = FakeModel(policy, name, policies)
        return fake, serve(fake.app) + "/v1"

    return make


@pytest.fixture(scope="session")
def echo_stack() -> Iterator[str]:
    """The real embedded stack (controller + ``echo`` worker, as subprocesses); its URL."""
    from agentrl_envs.stack import LocalStack

    with LocalStack(["echo"], split="dev") as stack:
        yield stack.url


def first_turn_requests(fake: FakeModel) -> Counter[tuple[str, str]]:
    """(model, word) → how many episodes the model was asked to start (requests with no assistant turn yet)."""
    counts: Counter[tuple[str, str]] = Counter()
    for body in fake.requests:
        if not any(m["role"] == "assistant" for m in body["messages"]):
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            counts[(body["model"], re.search(r"Echo the word '(\w+)'", user).group(1))] += 1
    return counts
