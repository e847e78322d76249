"""The wire-level suite (agentrl_envs.conformance.wire) fails a worker that breaks a rule, saying what it
expected and what came.

Each broken worker is our real worker (WorkerService, the Calc test task: 8 rounds, 2 slots)
behind an ASGI layer that breaks exactly one rule of the protocol (it changes one answer, or
answers one route itself), on 127.0.0.1 with a controller in this process whose idle timeout is
2 s. The unbroken layer passes every check first: each failure comes from its breakage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from stack_helpers import wait_for
from tasks_for_tests import Calc

from agentrl_envs.conformance.wire import WireOptions, run_conformance
from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread, listening_socket
from agentrl_envs.task import Task
from agentrl_envs.tasks.echo import EchoTask
from agentrl_envs.worker import WorkerService, create_worker_app

# (method, path, query, request body) -> (status, body) to answer instead of the worker, or None.
Answer = Callable[[str, str, dict[str, str], Any], "tuple[int, Any] | None"]
# (method, path, request body, status, body) -> (status, body) to send instead of the worker's answer.
Rewrite = Callable[[str, str, Any, int, Any], "tuple[int, Any]"]

IDLE_S = 2.0
OPTIONS = WireOptions(idle_timeout=IDLE_S, settle=2.0)


class Broken:
    """An ASGI layer around a worker app: ``answer`` may answer a request itself, ``rewrite`` may
    change the worker's answer (JSON bodies; other headers, such as ``session_id``, kept)."""

    def __init__(self, app: Any, *, answer: Answer | None = None, rewrite: Rewrite | None = None) -> None:
        self.app, self.answer, self.rewrite = app, answer, rewrite

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(raw) if raw else None
        method, path = scope["method"], scope["path"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode()))
        own = self.answer(method, path, query, request) if self.answer else None
        if own is not None:
            await _send(send, *own, [])
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        head: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                head.update(message)
            else:
                chunks.append(message.get("body", b""))

        await self.app(scope, replay, capture)
        status, body = head["status"], json.loads(b"".join(chunks) or b"null")
        if self.rewrite is not None:
            status, body = self.rewrite(method, path, request, status, body)
        kept = [(k, v) for k, v in head.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        await _send(send, status, body, kept)


async def _send(send: Any, status: int, body: Any, headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def controller() -> Iterator[str]:
    server = ServerThread(create_controller_app(ControllerService(idle_timeout=IDLE_S))).start()
    yield server.url
    server.stop()


@pytest.fixture
def broken_worker(controller: str) -> Iterator[Callable[..., str]]:
    """``start(answer=..., rewrite=..., task=Calc, **worker_kwargs)``: a worker of ``task`` (split
    dev) behind a :class:`Broken` layer, registered with ``controller``; the controller's URL."""
    servers: list[ServerThread] = []

    def start(
        *, answer: Answer | None = None, rewrite: Rewrite | None = None, task: type[Task] = Calc, **worker_kwargs: Any
    ) -> str:
        listen = listening_socket()
        port = listen.getsockname()[1]
        service = WorkerService(
            TaskRuntime(task, split="dev"),
            controller_url=controller,
            self_address=f"http://127.0.0.1:{port}/api",
            heartbeat_interval=0.5,
            **worker_kwargs,
        )
        servers.append(ServerThread(Broken(create_worker_app(service), answer=answer, rewrite=rewrite), listen=listen).start())
        wait_for(lambda: any(w["alive"] for w in httpx.get(f"{controller}/api/list_workers").json().get(task.name, [])))
        return controller

    yield start
    for s in servers:
        s.stop()


def test_the_unbroken_layer_passes_every_check(broken_worker):
    report = run_conformance(broken_worker(), "calc", options=OPTIONS)
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes == {**dict.fromkeys(outcomes, "passed"), "reference_replay": "skipped"}, report.text()
    assert "offers no reference" in report.result("reference_replay").message


def calls(body: Any) -> list[str]:
    """The names of the tools a worker interact request calls."""
    return [c["function"]["name"] for m in (body or {}).get("messages") or [] for c in m.get("tool_calls") or []]


def reference(offset: int) -> Answer:
    """Offers, for each Calc sample, the answer ``a + b + offset`` (0: the right one)."""

    def answer(method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
        if path != "/api/reference":
            return None
        sample = Calc.load_samples()[int(query["index"])]
        args = json.dumps({"value": sample["a"] + sample["b"] + offset})
        call = {"id": "r1", "type": "function", "function": {"name": "answer", "arguments": args}}
        return 200, {"index": int(query["index"]), "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}

    return answer


def test_a_worker_offered_reference_that_solves_passes(broken_worker):
    report = run_conformance(broken_worker(answer=reference(0)), "calc", options=OPTIONS, checks=["reference_replay"])
    assert report.result("reference_replay").outcome == "passed", report.text()


def _no_cancel(method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
    """Answers a cancel as done, and keeps the session."""
    return (200, {"session_id": body["session_id"]}) if path == "/api/cancel" else None


def _set(path: str, change: Callable[[Any, Any], Any], status: int | None = None) -> Rewrite:
    """Rewrites the answers to ``path`` (of ``status``, if given) with ``change(request, body)``."""

    def rewrite(method: str, p: str, request: Any, code: int, body: Any) -> tuple[int, Any]:
        return (code, change(request, body)) if p == path and status in (None, code) else (code, body)

    return rewrite


def _rename_first_tool(request: Any, body: Any) -> Any:
    body["tools"][0]["function"]["name"] = "add two"
    return body


def _limit_as_completed(request: Any, body: Any) -> Any:
    if body["env_out"]["status"] == "task limit reached":
        body["env_out"].update(status="completed", reward=1.0)
    return body


def _unknown_tool_crashes(method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
    if path == "/api/interact" and "conformance_no_such_tool" in calls(body):
        return 500, {"detail": "KeyError: 'conformance_no_such_tool'", "error": "internal_error", "data": {}}
    return None


def _full_as_503(method: str, p: str, request: Any, code: int, body: Any) -> tuple[int, Any]:
    return (503, body) if p == "/api/start_sample" and code == 406 else (code, body)


def _invalid_schema(request: Any, body: Any) -> Any:
    body["tools"][0]["function"]["parameters"]["properties"]["x"] = {"type": "integer", "minimum": "zero"}
    return body


def _same_name_twice(request: Any, body: Any) -> Any:
    body["tools"][1]["function"]["name"] = body["tools"][0]["function"]["name"]
    return body


def _no_tool_call_id(request: Any, body: Any) -> Any:
    for m in body["env_out"]["messages"]:
        m.pop("tool_call_id", None)
    return body


class _AnswersEnded:
    """Remembers each session whose step ended its episode, and answers a later step of it with
    200 (the last answer again) instead of the worker's refusal."""

    def __init__(self) -> None:
        self.ended: dict[int, Any] = {}

    def answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
        sid = (body or {}).get("session_id") if path == "/api/interact" else None
        return (200, self.ended[sid]) if sid in self.ended else None

    def rewrite(self, method: str, path: str, request: Any, code: int, body: Any) -> tuple[int, Any]:
        if path == "/api/interact" and code == 200 and body["env_out"]["finish"]:
            self.ended[request["session_id"]] = body
        return code, body


def _answers_ended() -> dict[str, Any]:
    layer = _AnswersEnded()
    return {"answer": layer.answer, "rewrite": layer.rewrite}


class _KeepsEnded(_AnswersEnded):
    """Lists each session whose episode ended in get_sessions still, as a worker that never frees it."""

    def answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
        return None

    def rewrite(self, method: str, path: str, request: Any, code: int, body: Any) -> tuple[int, Any]:
        if path == "/api/get_sessions":
            return code, {**body, **{str(sid): 0 for sid in self.ended}}
        return super().rewrite(method, path, request, code, body)


def _keeps_ended() -> dict[str, Any]:
    layer = _KeepsEnded()
    return {"answer": layer.answer, "rewrite": layer.rewrite}


# (check, what breaks it: Broken's and WorkerService's arguments, options, fragments of the failure message)
BREAKAGES: dict[str, tuple[str, dict[str, Any], WireOptions, list[str]]] = {
    "health: worker_status's concurrency is not its heartbeat's": (
        "health",
        {"rewrite": _set("/api/worker_status", lambda _, b: {**b, "concurrency": 99})},
        OPTIONS,
        ["expected worker_status's concurrency to be its heartbeat's (2), got 99"],
    ),
    "tool_schemas: a tool name with a space": (
        "tool_schemas",
        {"rewrite": _set("/api/start_sample", _rename_first_tool)},
        OPTIONS,
        ["expected a function name of 1-64 letters, digits, '_' or '-' (OpenAI's rule), got 'add two'"],
    ),
    "bad_calls: an unknown tool is an HTTP 500": (
        "bad_calls",
        {"answer": _unknown_tool_crashes},
        OPTIONS,
        [
            "round 1 (an unknown tool): expected the episode to go on, or to end with a status that puts the mistake on the model",
            "got it ended (status 'task error'",
            "rejected the step (500)",
        ],
    ),
    "turn_limit: the round limit ends 'completed' with reward 1": (
        "turn_limit",
        {"rewrite": _set("/api/interact", _limit_as_completed)},
        OPTIONS,
        [
            "round 8 without a tool call: expected the episode to end with status 'task limit reached', reward 0; got status 'completed', reward 1.0"
        ],
    ),
    "turn_limit: no end at the round limit given": (
        "turn_limit",
        {"rewrite": _set("/api/interact", _limit_as_completed)},
        WireOptions(idle_timeout=IDLE_S, settle=2.0, turn_limit=5),
        ["expected the episode to end 'task limit reached' at round 5, got it still running"],
    ),
    "tool_schemas: parameters that are not valid JSON Schema": (
        "tool_schemas",
        {"rewrite": _set("/api/start_sample", _invalid_schema)},
        OPTIONS,
        ["tool 'add': 'parameters' is not valid JSON Schema (Draft 2020-12): 'zero' is not of type 'number'"],
    ),
    "tool_schemas: two tools of one name": (
        "tool_schemas",
        {"rewrite": _set("/api/start_sample", _same_name_twice)},
        OPTIONS,
        ["tool 'add': expected unique tool names, got 'add' twice"],
    ),
    "bad_calls: a tool call answered without its tool_call_id": (
        "bad_calls",
        {"rewrite": _set("/api/interact", _no_tool_call_id)},
        OPTIONS,
        [
            "round 1 (an unknown tool): expected a tool message answering call 'c_unknown' (a chat answers every tool call"
            " before the model's next turn), got"
        ],
    ),
    "ended_session: the worker answers a step of a session that ended with 200": (
        "ended_session",
        _answers_ended(),
        OPTIONS,
        [
            "expected worker http://127.0.0.1:",
            "to refuse a step of session",
            "after it ended (status 'completed', reward 0, round 3 calling answer({\"value\": 0})) (HTTP 4xx), got POST"
            " /api/interact -> HTTP 200",
        ],
    ),
    "ended_session: the worker keeps a session that ended": (
        "ended_session",
        _keeps_ended(),
        OPTIONS,
        ["to release session", "after it ended (status 'completed'", "within 2 s, got it still in the worker's get_sessions"],
    ),
    "cancel: the worker keeps a cancelled session": (
        "cancel",
        {"answer": _no_cancel},
        OPTIONS,
        ["to release session", "after it was cancelled within 2 s, got it still in the worker's get_sessions"],
    ),
    "capacity: a full worker answers 503": (
        "capacity",
        {"rewrite": _full_as_503},
        OPTIONS,
        ["expected HTTP 406 to a start on the full worker (2/2 sessions), got POST /api/start_sample -> HTTP 503"],
    ),
    "capacity: a full worker starts one more": (
        "capacity",
        {"concurrency": 3, "rewrite": _set("/api/worker_status", lambda _, b: {**b, "concurrency": 2})},
        OPTIONS,
        ["expected HTTP 406 to a start on the full worker (2/2 sessions), got POST /api/start_sample -> HTTP 200"],
    ),
    "idle_expiry: the worker keeps the session the controller expired": (
        "idle_expiry",
        {"answer": _no_cancel},
        OPTIONS,
        ["left idle for the controller's idle timeout (2 s) within 4 s, got it still in the worker's get_sessions"],
    ),
    "idle_expiry: the worker never drops an idle session itself": (
        "idle_expiry",
        {"idle_timeout": 3600.0},
        WireOptions(worker_idle_timeout=1.0, settle=2.0),
        ["to drop session", "idle for its own idle timeout (1 s), within 3 s; got it still in get_sessions"],
    ),
    "reference_replay: the offered reference does not solve": (
        "reference_replay",
        {"answer": reference(1)},
        OPTIONS,
        [
            "expected every reference replay to end 'completed' with reward 1, got 2 of 2 not solved",
            "sample 0: status 'completed', reward 0 after 1 of 1 reference turns",
        ],
    ),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_worker_that_breaks_a_rule_fails_that_check(broken_worker, breakage):
    check, how, options, fragments = BREAKAGES[breakage]
    report = run_conformance(broken_worker(**how), "calc", options=options, checks=[check])
    result = report.result(check)
    assert result.outcome == "failed", report.text()
    assert result.message.startswith("task 'calc' at http://127.0.0.1:"), result.message
    for fragment in fragments:
        assert fragment in result.message, f"{fragment!r} not in:\n{result.message}"
    assert not report.passed and "FAILED" in report.text()


def _undescribed(request: Any, body: Any) -> Any:
    for t in body["tools"]:
        t["function"].pop("description")
        for prop in t["function"]["parameters"]["properties"].values():
            prop.pop("description", None)
    return body


def test_missing_descriptions_are_advice_not_failure(broken_worker):
    url = broken_worker(rewrite=_set("/api/start_sample", _undescribed))
    report = run_conformance(url, "calc", options=OPTIONS, checks=["tool_schemas"])
    result = report.result("tool_schemas")
    assert result.outcome == "passed", report.text()
    assert all(note.startswith("advice: task 'calc' at ") for note in result.notes), result.notes
    assert any("tool 'add': expected a non-empty description" in note for note in result.notes), result.notes
    assert any("tool 'add': expected a description for every argument" in note and "['x', 'y']" in note for note in result.notes)


def _other_opening(request: Any, body: Any) -> Any:
    body["messages"][-1]["content"] = "Echo the word 'other'."
    return body


def test_the_installed_tasks_references_are_replayed_only_for_its_own_samples(broken_worker):
    # our echo worker, its references those of the echo installed here: replayed
    report = run_conformance(broken_worker(task=EchoTask), "echo", options=OPTIONS, checks=["reference_replay"])
    result = report.result("reference_replay")
    assert result.outcome == "passed", report.text()
    assert result.notes[:2] == [
        "reference_policy of the task installed here",
        "for this worker's samples: 8 of split 'dev', the same tools and opening messages of samples [0, 7]",
    ]


def test_references_are_not_replayed_on_samples_that_say_something_else(broken_worker):
    url = broken_worker(task=EchoTask, rewrite=_set("/api/start_sample", _other_opening))
    report = run_conformance(url, "echo", options=OPTIONS, checks=["reference_replay"])
    result = report.result("reference_replay")
    assert result.outcome == "skipped", report.text()
    assert "sample 0's opening messages are not those of the task 'echo' installed here (split 'dev')" in result.message
    assert "Echo the word 'other'." in result.message and "and the worker offers no reference" in result.message
