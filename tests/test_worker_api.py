"""The worker's own protocol endpoints (what a controller calls), over loopback HTTP."""

from __future__ import annotations

import httpx
import pytest
from stack_helpers import ServerThread
from tasks_for_tests import Calc, call

from agentrl_envs.episode import TaskRuntime
from agentrl_envs.worker import WorkerService, create_worker_app


@pytest.fixture
def worker():
    server = ServerThread(create_worker_app(WorkerService(TaskRuntime(Calc, split="dev")))).start()
    yield f"{server.url}/api"
    server.stop()


def test_worker_protocol_and_errors(worker):
    r = httpx.post(f"{worker}/start_sample", json={"index": 1, "session_id": 7})
    assert r.status_code == 200 and r.headers["session_id"] == "7"
    body = r.json()
    assert body["status"] == "running" and not body["finish"] and body["messages"][0]["role"] == "user" and body["tools"]
    dup = httpx.post(f"{worker}/start_sample", json={"index": 0, "session_id": 7})
    assert dup.status_code == 400 and dup.json()["error"] == "session_error" and "already exists" in dup.json()["detail"]
    assert httpx.post(f"{worker}/start_sample", json={"index": 0, "session_id": 8}).status_code == 200
    full = httpx.post(f"{worker}/start_sample", json={"index": 0, "session_id": 9})
    assert full.status_code == 406 and full.json()["data"] == {"active_sessions": 2, "max_sessions": 2}
    assert httpx.get(f"{worker}/worker_status").json() == {"concurrency": 2, "current": 2}
    assert httpx.get(f"{worker}/get_sessions").json() == {"7": 1, "8": 0}
    assert httpx.get(f"{worker}/get_indices").json() == [0, 1]

    r = httpx.post(f"{worker}/interact", json={"session_id": 7, "messages": [call("answer", '{"value": 6}')]})
    assert r.json() == {
        "session_id": 7,
        "env_out": {
            "messages": [{"role": "tool", "tool_call_id": "c1", "content": "answer recorded"}],
            "status": "completed",
            "finish": True,
            "reward": 1.0,
            "metric": {"turns": 1, "tool_errors": 0},
        },
    }
    gone = httpx.post(f"{worker}/interact", json={"session_id": 7, "messages": [call("add", '{"x": 1}')]})
    assert gone.status_code == 404 and gone.json()["error"] == "unknown_session"
    bad = httpx.post(f"{worker}/interact", json={"messages": []})
    assert bad.status_code == 422 and "session_id" in bad.json()["detail"]
    assert httpx.post(f"{worker}/cancel", json={"session_id": 8}).status_code == 200
    assert httpx.post(f"{worker}/cancel", json={"session_id": 8}).status_code == 404
    assert httpx.get(f"{worker}/worker_status").json()["current"] == 0
